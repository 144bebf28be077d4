"""DALR Table 8: the Table 3 loss ablations on wiki+coco, BERT-base (STS Avg and TR Avg)."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import COCO, COCO_NEEDS
from search_spaces._dalr_ablation import NAMES, ablation

STS_AVG = (78.64, 77.20, 77.48, 78.19, 77.85, 77.89, 78.31, 78.07, 76.75)
TR_AVG = (86.61, 85.39, 85.53, 86.42, 85.70, 85.74, 86.45, 86.33, 85.07)

GRID = Grid(
    name="dalr_table8",
    title="DALR Table 8: loss ablations, BERT wiki+coco",
    cells=tuple(Cell(n, ablation(n), {"avg": s, "transfer/avg": t})
                for n, s, t in zip(NAMES, STS_AVG, TR_AVG, strict=True)),
    baseline="DALR",
    base={**COCO, "lr": 1e-5, "epochs": 3},  # the wiki+coco script (docs/official-code.md §6.5)
    transfer=True,
    note=f"wiki+coco: {COCO_NEEDS}, so not on the demo. Published STS Avg and TR Avg only.",
)
