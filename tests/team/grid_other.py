"""A second tiny table, different from ``grid_tiny.py`` (other cells, other grid name), for two
tables written at once into one tracking server."""

from orchestrator.spec.grids import Cell, Grid

GRID = Grid(
    name="tiny_other",
    title="Second test table: MCSE at two temperatures (tiny BERT, demo data)",
    cells=(
        Cell("MCSE", {"objective.method": "mcse"}),
        Cell("MCSE cold", {"objective.method": "mcse", "objective.temperature": 0.03}),
    ),
    baseline="MCSE",
    seeds=(0, 1),
)
