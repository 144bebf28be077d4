"""DALR Table 3: loss ablations, BERT-base, wiki+flickr (STS Avg, mean over 5 runs)."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._dalr_ablation import NAMES, ablation

STS_AVG = (79.49, 78.24, 78.16, 79.15, 78.61, 78.82, 79.06, 78.91, 77.17)

GRID = Grid(
    name="dalr_table3",
    title="DALR Table 3: loss ablations, BERT wiki+flickr",
    cells=tuple(Cell(n, ablation(n), {"avg": v}) for n, v in zip(NAMES, STS_AVG, strict=True)),
    baseline="DALR",
    note="Baseline is the full DALR (an ablation table). Published STS Avg only; the transfer "
    "(TR) column is not evaluated here.",
)
