"""A stand-in for the MLflow store that ``orchestrator.results.table_report.build_report`` reads
and writes, for tests of the report alone (the real store: ``tests/orchestrator/test_ablate.py``).

One class for every such test: the report's reads of MLflow grew twice in one wave (a stale
``mmemb.report_error`` cleared, the members' events read from the children), and each copy of
this stand-in had to learn them one by one."""

from __future__ import annotations

from pathlib import Path


class ReportStore:
    """The children's scores (``{cell: {seed: {column: value}}}``) as MLflow gives them; the
    parent's uploaded files (``files``: their names) and summary metrics (``metrics``); children
    with no tags, so no members' events."""

    uri = "sqlite:///unused.db"

    def __init__(self, scores: dict):
        self._scores, self.files, self.metrics = scores, [], []
        self.client = self  # build_report logs the summary through ``tracker.client``

    def scores(self, parent_id):
        return self._scores, {}

    def children(self, parent_id):
        return []

    def log_artifact_file(self, run_id, path):
        self.files.append(Path(path).name)

    def log_batch(self, run_id, metrics=()):
        self.metrics += list(metrics)

    def clear_tag(self, run_id, key):  # a stored report clears a stale mmemb.report_error
        pass
