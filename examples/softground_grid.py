"""SoftGround (examples/softground.py) against MCSE on the demo, five seeds.

    python -m orchestrator.ablate --grid examples/softground_grid.py

The grid's folder is on the import path while the grid loads, so it imports the method beside it;
``--methods examples/softground.py`` would load it as well. No published numbers: a new method.
"""

import softground  # noqa: F401  (registers "softground")

from orchestrator.spec.grids import Cell, Grid

GRID = Grid(
    name="softground",
    title="SoftGround (soft grounding targets) vs MCSE",
    cells=(
        Cell("MCSE", {"objective.method": "mcse"}),
        Cell("SoftGround", {"objective.method": "softground"}),
        Cell("SoftGround alpha=0.6", {"objective.method": "softground", "objective.alpha": 0.6}),
    ),
    baseline="MCSE",
    note="SoftGround: MCSE with its grounding target shared with look-alike images "
    "(examples/softground.py); alpha 0.3 (its default) and 0.6.",
)
