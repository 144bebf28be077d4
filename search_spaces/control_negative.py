"""Negative control: MCSE against itself on disjoint seeds, where no test may find an effect.

Both cells are one configuration; the second trains with seeds shifted by ``SEED_OFFSET``, so the
two groups share no run, and any difference is seed noise. A significant result here is a false
positive. Its pairing (grid seed i with baseline seed i) is arbitrary, so the paired test is valid
but has no correlation to exploit.
"""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import MCSE

SEED_OFFSET = 1000
"""far above any grid's seeds (0-4, searches 100-104), so no run is shared with another table"""

GRID = Grid(
    name="control_negative",
    title="Negative control: MCSE vs MCSE on disjoint seeds must show no significant difference",
    cells=(
        Cell("MCSE", MCSE),
        Cell("MCSE (disjoint seeds)", MCSE, seed_offset=SEED_OFFSET),
    ),
    baseline="MCSE",
    note=f"One configuration twice; the second cell trains with seeds + {SEED_OFFSET}. Any "
    "significant difference is a false positive.",
)
