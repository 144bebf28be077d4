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
        Cell("SoftGround tau_t=0.2", {"objective.method": "softground",
                                      "objective.teacher_temperature": 0.2}),
    ),
    baseline="MCSE",
    note="SoftGround: MCSE with its grounding target shared with look-alike images "
    "(examples/softground.py), alpha 0.3. At its default tau_t 0.05 only near-duplicate images "
    "get target mass; tau_t 0.2 spreads it over every similar image.",
)
