"""DALR Table 3: loss ablations, BERT-base, wiki+flickr (STS Avg and TR Avg, mean over 5 runs)."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._dalr_ablation import NAMES, ablation

STS_AVG = (79.49, 78.24, 78.16, 79.15, 78.61, 78.82, 79.06, 78.91, 77.17)
TR_AVG = (86.92, 85.95, 85.72, 86.70, 86.22, 86.43, 86.63, 86.50, 85.54)

GRID = Grid(
    name="dalr_table3",
    title="DALR Table 3: loss ablations, BERT wiki+flickr",
    cells=tuple(Cell(n, ablation(n), {"avg": s, "transfer/avg": t})
                for n, s, t in zip(NAMES, STS_AVG, TR_AVG, strict=True)),
    baseline="DALR",
    transfer=True,
    note="Baseline is the full DALR (an ablation table). Published STS Avg and TR Avg (the mean "
    "of the seven transfer accuracies) only.",
)
