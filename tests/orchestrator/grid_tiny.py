"""A two-cell, two-seed table for the resilience tests: the smallest grid with a baseline.

Loaded by file (``--grid tests/orchestrator/grid_tiny.py``) the way a user's own table is, so the
tests exercise the custom-grid path. With the tiny BERT profile each trial takes seconds.
"""

from orchestrator.spec.grids import Cell, Grid

GRID = Grid(
    name="tiny",
    title="Resilience test table: MCSE vs KDMCSE (tiny BERT, demo data)",
    cells=(
        Cell("MCSE", {"objective.method": "mcse"}),
        Cell("KDMCSE", {"objective.method": "kdmcse", "objective.threshold": 0.8}),
    ),
    baseline="MCSE",
    seeds=(0, 1),
)
