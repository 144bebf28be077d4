"""KDMCSE Table 1 (main results), RoBERTa-base, wiki+coco: SimCSE, MCSE, KDMCSE (published Avg only)."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import COCO, COCO_NEEDS, KDMCSE, MCSE, ROBERTA, SIMCSE

SETTING = {**COCO, **ROBERTA}

GRID = Grid(
    name="kdmcse_table1_roberta_coco",
    title="KDMCSE Table 1: SimCSE vs MCSE vs KDMCSE, RoBERTa wiki+coco",
    cells=(
        Cell("SimCSE", {**SIMCSE, **SETTING}, {"avg": 74.8}),
        Cell("MCSE", {**MCSE, **SETTING}, {"avg": 77.6}),
        Cell("KDMCSE", {**KDMCSE, **SETTING}, {"avg": 78.0}),
    ),
    baseline="MCSE",
    note=f"Published Avg over 5 seeds; needs roberta-base, and {COCO_NEEDS}, so not on the demo.",
)
