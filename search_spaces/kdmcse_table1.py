"""KDMCSE Table 1 (main results): SimCSE, MCSE, KDMCSE, BERT-base, wiki+flickr."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import KDMCSE, MAIN_BERT_FLICKR, MCSE, SIMCSE

GRID = Grid(
    name="kdmcse_table1",
    title="KDMCSE Table 1: SimCSE vs MCSE vs KDMCSE, BERT wiki+flickr",
    cells=(
        Cell("SimCSE", SIMCSE, MAIN_BERT_FLICKR["SimCSE"]),
        Cell("MCSE", MCSE, MAIN_BERT_FLICKR["MCSE"]),
        Cell("KDMCSE", KDMCSE, MAIN_BERT_FLICKR["KDMCSE"]),
    ),
    baseline="MCSE",
    note="Published: mean over 5 seeds. SimCSE trains on the text part only (3 epochs, as MCSE's "
    "run_wiki.sh). RoBERTa / wiki+coco rows need the paper profile with another encoder or store.",
)
