"""Positive control: MCSE vs text-only SimCSE, a known effect the tests must find.

MCSE beats SimCSE by 2.0 STS Avg points in the papers (docs/published-tables.md, main results,
BERT-base wiki+flickr), the largest gap among the methods compared here. On a world where grounding
helps, a paired t-test over 5 seeds must find MCSE better (p < 0.05); if it does not, the table
cannot be trusted to see the smaller gaps of the ablations either.
"""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import MAIN_BERT_FLICKR, MCSE, SIMCSE

GRID = Grid(
    name="control_positive",
    title="Positive control: MCSE must beat text-only SimCSE (paired p < 0.05, 5 seeds)",
    cells=(
        Cell("MCSE", MCSE, MAIN_BERT_FLICKR["MCSE"]),
        Cell("SimCSE", SIMCSE, MAIN_BERT_FLICKR["SimCSE"]),
    ),
    baseline="MCSE",
    note="A known effect: SimCSE must come out significantly below MCSE. Same seeds in both cells "
    "(the paired test pairs them).",
)
