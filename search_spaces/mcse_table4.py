"""MCSE Table 4: the weight lambda of the multimodal loss, Flickr30k only, STS-B dev (BERT-base)."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import MCSE

LAMBDAS = (0.001, 0.01, 0.05, 0.1, 0.5)

GRID = Grid(
    name="mcse_table4",
    title="MCSE Table 4: lambda sweep {0.001..0.5}, Flickr30k only, STS-B dev",
    cells=tuple(Cell(f"lambda={v}", {**MCSE, "objective.lam": v}, x=v) for v in LAMBDAS),
    baseline="lambda=0.05",
    base={"data.caption_only": True, "epochs": 6},  # as run_flickr.sh (docs/official-code.md §4.4)
    columns=("best_stsb_dev", "avg"),
    plot="sweep",
    xlabel="lambda (log scale)",
    note="Baseline: lambda 0.05, the official caption-only value. No per-cell numbers are given "
    "(docs/published-tables.md: the printed table is garbled). Caption-only on the demo too.",
)
