"""FROZEN: the grid of the plug-in written from the previous docs (olddocs_method.py), as that
page printed its grid: it imports the method file beside it."""

import olddocs_method  # noqa: F401  (registers "olddocs")

from orchestrator.spec.grids import Cell, Grid

GRID = Grid(
    name="olddocs",
    title="A plug-in written from the previous docs vs MCSE",
    cells=(
        Cell("MCSE", {"objective.method": "mcse"}),
        Cell("OldDocs", {"objective.method": "olddocs"}),
    ),
    baseline="MCSE",
)
