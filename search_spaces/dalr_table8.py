"""DALR Table 8: the Table 3 loss ablations on wiki+coco, BERT-base (STS Avg)."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import COCO
from search_spaces._dalr_ablation import NAMES, ablation

STS_AVG = (78.64, 77.20, 77.48, 78.19, 77.85, 77.89, 78.31, 78.07, 76.75)

GRID = Grid(
    name="dalr_table8",
    title="DALR Table 8: loss ablations, BERT wiki+coco",
    cells=tuple(Cell(n, ablation(n), {"avg": v}) for n, v in zip(NAMES, STS_AVG, strict=True)),
    baseline="DALR",
    base={**COCO, "lr": 1e-5, "epochs": 3},  # the wiki+coco script (docs/official-code.md §6.5)
    note="wiki+coco: $MMEMB_DATA/coco_clip_vitl14.parquet (python -m trainables.convert); not on the "
    "demo. Published STS Avg only.",
)
