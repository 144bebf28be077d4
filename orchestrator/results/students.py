"""The best student of a cell (``python -m orchestrator.best``): the child run that scores best.

Selecting on a test score picks the luckiest seed; ``best_stsb_dev`` selects on dev. The model loads with ``mlflow.sentence_transformers.load_model(URI)`` or, once downloaded,
``SentenceTransformer("student/model.sentence_transformer")``.
"""

from __future__ import annotations

from orchestrator.tracking.client import TAG, Tracker


def best_child(tracker: Tracker, parent: str, cell: str, metric: str):
    kids = [c for c in tracker.children(parent) if c.data.tags.get(f"{TAG}cell") == cell
            and c.info.status == "FINISHED" and f"{TAG}model" in c.data.tags]
    if not kids:
        cells = sorted({c.data.tags.get(f"{TAG}cell", "?") for c in tracker.children(parent)})
        raise ValueError(f"no finished run with a model in cell {cell!r} of run {parent}; "
                         f"its cells: {cells}")
    scored = [c for c in kids if metric in c.data.metrics]
    if not scored:
        raise ValueError(f"no run of cell {cell!r} has metric {metric!r}; try test/avg or best_stsb_dev")
    return max(scored, key=lambda c: c.data.metrics[metric])
