"""DALR Table 2: transfer tasks (TR), MCSE vs KDMCSE vs DALR, BERT-base, wiki+flickr."""

from orchestrator.spec.grids import Cell, Grid
from search_spaces._common import DALR, KDMCSE, MCSE

TR_AVG = {"MCSE": 85.64, "KDMCSE": 86.53, "DALR": 86.92}
"""DALR Table 2, Avg of the seven transfer accuracies (docs/published-tables.md)"""

GRID = Grid(
    name="dalr_table2",
    title="DALR Table 2: transfer tasks, MCSE vs KDMCSE vs DALR, BERT wiki+flickr",
    cells=tuple(Cell(n, ov, {"transfer/avg": TR_AVG[n]})
                for n, ov in (("MCSE", MCSE), ("KDMCSE", KDMCSE), ("DALR", DALR))),
    baseline="MCSE",
    transfer=True,
    note="Published TR Avg only (the mean of MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC). DALR's copy "
    "of SimCSE's evaluation.py prints the selection accuracy (devacc) in its transfer table "
    "(docs/official-code.md §6.6); ours is the test accuracy, with devacc logged beside it "
    "(transfer/<task>/devacc). RoBERTa rows: dalr_table2_roberta.",
)
