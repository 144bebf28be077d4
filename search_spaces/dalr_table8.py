"""DALR Table 8: the Table 3 loss ablations on wiki+coco, BERT-base (STS Avg)."""

from orchestrator.grids import Cell, Grid
from search_spaces._dalr_ablation import NAMES, ablation

STS_AVG = (78.64, 77.20, 77.48, 78.19, 77.85, 77.89, 78.31, 78.07, 76.75)

GRID = Grid(
    name="dalr_table8",
    title="DALR Table 8: loss ablations, BERT wiki+coco",
    cells=tuple(Cell(n, ablation(n), {"avg": v}) for n, v in zip(NAMES, STS_AVG, strict=True)),
    baseline="DALR",
    note="wiki+coco: no profile names this data setting; run with a profile (YAML) whose data.pairs "
    "is the COCO CLIP store, and the wiki+coco script's lr 1e-5, 3 epochs. Published STS Avg only.",
)
