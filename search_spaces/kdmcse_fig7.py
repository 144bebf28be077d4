"""KDMCSE Figure 7: STS average vs the AdapACSE margin m, 0.025 to 0.225 rad, BERT wiki+flickr."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import KDMCSE, MAIN_BERT_FLICKR, MCSE

MARGINS = tuple(round(0.025 * k, 3) for k in range(1, 10))

GRID = Grid(
    name="kdmcse_fig7",
    title="KDMCSE Figure 7: AdapACSE margin sweep 0.025-0.225, BERT wiki+flickr",
    cells=(
        Cell("MCSE", MCSE, MAIN_BERT_FLICKR["MCSE"]),
        *(Cell(f"m={m}", {**KDMCSE, "objective.grounding_margin": m}, x=m) for m in MARGINS),
    ),
    baseline="MCSE",
    plot="sweep",
    xlabel="AdapACSE margin m (rad)",
    note="The figure gives no per-point numbers; the paper's best is m=0.125. Only the grounding "
    "margin m2 moves; the text margin m1 stays at the code's 0.15.",
)
