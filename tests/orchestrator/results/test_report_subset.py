"""The report of a table that ran a subset of its grid's cells (``--cells``), and the notes the
pre-start checks leave in it; built from a stand-in for MLflow (the real store: test_ablate.py)."""

from __future__ import annotations

from orchestrator.results.table_report import build_report
from tests.orchestrator.results.report_store import ReportStore

SEEDS = [0, 1]
TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")


def _scores(offset):
    return {s: {t: 70.0 + offset + s + i for i, t in enumerate(TASKS)} for s in SEEDS}


def spec(**extra):
    """table3's spec as ``orchestrator.ablate --cells KDMCSE`` stores it: every cell's published
    numbers (the grid's), the cells that ran."""
    published = {c: {"avg": 77.0 + i} for i, c in
                 enumerate(("MCSE", "KDMCSE", "without AdapACSE", "without threshold filtering"))}
    return {"name": "kdmcse_table3", "title": "Table 3", "baseline": "MCSE", "seeds": SEEDS,
            "columns": [*TASKS, "avg"], "plot": "bars", "xlabel": None, "note": "",
            "x": {}, "published": published, "seed_offsets": {}, "demo": True,
            "cells": ["MCSE", "KDMCSE"], **extra}


def test_a_subset_of_cells_gets_its_table(tmp_path):
    tr = ReportStore({"MCSE": _scores(0), "KDMCSE": _scores(1)})
    analysis, md, upload_error = build_report(tr, "p", spec(), tmp_path)
    assert upload_error is None
    assert analysis.cells == ("MCSE", "KDMCSE")
    assert "| MCSE (baseline) |" in md and "| KDMCSE |" in md and "AdapACSE" not in md
    assert set(tr.files) == {"report.md", "report.csv", "report.png"}


def test_the_checks_warnings_are_the_reports_notes(tmp_path):
    tr = ReportStore({"MCSE": _scores(0), "KDMCSE": _scores(1)})
    warning = ("cell 'KDMCSE': objective.threshold=0.8 (dot) masks 69% of 4096 sampled "
               "negatives of store.parquet, so KDMCSE's grounding terms learn from only the 31% left")
    _, md, _ = build_report(tr, "p", spec(warnings=[warning]), tmp_path)
    notes = md.split("Notes from the checks before the start:\n", 1)[1]
    assert notes.startswith(f"- {warning}\n")
    assert (tmp_path / "report.md").read_text() == md
