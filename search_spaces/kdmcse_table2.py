"""KDMCSE Table 2: alignment and uniformity (Wang and Isola) on STS-B dev, BERT-base, wiki+flickr."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import KDMCSE, MCSE

GRID = Grid(
    name="kdmcse_table2",
    title="KDMCSE Table 2: alignment / uniformity, MCSE vs KDMCSE, BERT wiki+flickr",
    cells=(
        Cell("MCSE", MCSE, {"alignment": 0.293, "uniformity": -2.491}),
        Cell("KDMCSE", KDMCSE, {"alignment": 0.245, "uniformity": -2.387}),
    ),
    baseline="MCSE",
    columns=("alignment", "uniformity", "avg"),
    note="Lower is better for both. Computed as MCSE's code does (per batch of 128 STS-B dev pairs, "
    "positives gold >= 4), on the final model.",
)
