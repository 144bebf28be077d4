"""DALR Table 2: transfer tasks (TR), MCSE vs KDMCSE vs DALR, RoBERTa-base, wiki+flickr."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import DALR, KDMCSE, MCSE, ROBERTA

TR_AVG = {"MCSE": 86.29, "KDMCSE": 86.87, "DALR": 87.45}
"""DALR Table 2, Avg of the seven transfer accuracies (docs/published-tables.md)"""

GRID = Grid(
    name="dalr_table2_roberta",
    title="DALR Table 2: transfer tasks, MCSE vs KDMCSE vs DALR, RoBERTa wiki+flickr",
    cells=tuple(Cell(n, {**ov, **ROBERTA}, {"transfer/avg": TR_AVG[n]})
                for n, ov in (("MCSE", MCSE), ("KDMCSE", KDMCSE), ("DALR", DALR))),
    baseline="MCSE",
    transfer=True,
    note="Published TR Avg only; needs the roberta-base model (the demo's student is "
    "BERT-family), so not on the demo. DALR's evaluation script prints devacc in its transfer "
    "table (docs/official-code.md §6.6); ours is the test accuracy.",
)
