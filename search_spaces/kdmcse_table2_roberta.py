"""KDMCSE Table 2: alignment and uniformity (Wang and Isola) on STS-B dev, RoBERTa-base, wiki+flickr."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import KDMCSE, MCSE, ROBERTA

GRID = Grid(
    name="kdmcse_table2_roberta",
    title="KDMCSE Table 2: alignment / uniformity, MCSE vs KDMCSE, RoBERTa wiki+flickr",
    cells=(
        Cell("MCSE", {**MCSE, **ROBERTA}, {"alignment": 0.209, "uniformity": -1.721}),
        Cell("KDMCSE", {**KDMCSE, **ROBERTA}, {"alignment": 0.174, "uniformity": -1.952}),
    ),
    baseline="MCSE",
    columns=("alignment", "uniformity", "avg"),
    note="Lower is better for both. Computed as MCSE's code does (per batch of 128 STS-B dev pairs, "
    "positives gold >= 4), on the final model; needs roberta-base, so not on the demo.",
)
