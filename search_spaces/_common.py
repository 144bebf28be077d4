"""Cells shared by several grids, so one method means one config (one hash) in every table.

KDMCSE here is the paper's model: the threshold filter ON at the scripts' SCORE_BASE 0.8
(docs/official-code.md §5.4, §5.6); the released scripts leave it off, and KDMCSE Table 3 lists "without threshold
filtering" as an ablation, so the published KDMCSE rows are the filtered model.
"""

from __future__ import annotations

from orchestrator.spec.grids import STS_COLUMNS
from trainables.config.stores import STORES

SIMCSE = {"objective.method": "simcse"}
MCSE = {"objective.method": "mcse"}
KDMCSE = {"objective.method": "kdmcse", "objective.threshold": 0.8}
DALR = {"objective.method": "dalr"}


def row(*values: float) -> dict[str, float]:
    """STS12..SICK-R, Avg in the papers' column order."""
    if len(values) != len(STS_COLUMNS):
        raise ValueError(f"a published row needs {len(STS_COLUMNS)} values, got {len(values)}")
    return dict(zip(STS_COLUMNS, values, strict=True))


# Main results, BERT-base, wiki+flickr, mean over 5 seeds (docs/published-tables.md).
MAIN_BERT_FLICKR = {
    "SimCSE": row(69.9, 79.8, 72.9, 81.9, 77.8, 76.6, 68.4, 75.3),
    "MCSE": row(71.4, 81.8, 74.8, 83.6, 77.5, 79.5, 72.6, 77.3),
    "KDMCSE": row(74.4, 83.1, 76.3, 83.7, 78.8, 81.3, 73.0, 78.6),
    "DALR": row(73.9, 84.0, 76.5, 84.3, 80.6, 81.8, 75.3, 79.5),
}


# Settings of the other rows of the papers' tables. They name their own data or encoder, so the
# demo profile (which replaces both) refuses them at once rather than run them on its own world.
COCO = {"data.pairs": STORES["coco"].path}  # $MMEMB_DATA is read when the config is built
"""wiki+coco: Wiki1M with COCO captions and CLIP ViT-L/14 features instead of Flickr30k, for every
cell (MCSE's too: one store per table; python -m trainables.fetch paper says how to make it)"""
COCO_NEEDS = f"needs {STORES['coco'].path} (python -m trainables.fetch paper says how to make it)"
"""what the wiki+coco grids' notes say of their data"""
ROBERTA = {"encoder": "roberta-base", "lr": 1e-5, "batch_size": 128}
"""RoBERTa-base rows: the papers' RoBERTa recipe (lr 1e-5, batch 128)"""
