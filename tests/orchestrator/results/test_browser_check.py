"""A table's runs can be compared in the real MLflow UI: headless Chromium renders the one-click
runs view, a child's page and the compare view (slow: starts a server and a browser)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import urllib.parse
from pathlib import Path

import pytest

from orchestrator.results import views
from orchestrator.results.browser_check import (
    ASSISTANT_FIRST_VISIT,
    TEST_METRICS,
    Chromium,
    _free_port,
    check_runs_view,
    check_ui,
    start_server,
    stop_server,
)
from orchestrator.tracking.client import Tracker

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("chromium") is None,
                                 reason="apt-get install chromium"),
              pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                                 reason="pip install 'mmemb[ui]' (Playwright)")]


def _store(tmp_path: Path) -> tuple[str, str, dict[str, dict]]:
    """A table of 2 cells x 2 seeds with their test scores, and one unrelated table."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tr = Tracker(uri)
    other, _ = tr.start_parent("older table", "table", "plan0", {}, resume=False)
    tr.start_child(other, {"run_name": "X | seed 0", "key": "x/0", "grid": "t", "cell": "X",
                           "seed": 0, "config_hash": "h", "run": {}})
    parent, _ = tr.start_parent("table3 (ui check)", "table", "plan", {}, resume=False)
    children = {}
    for i, (cell, seed) in enumerate([("MCSE", 0), ("MCSE", 1), ("KDMCSE", 0), ("KDMCSE", 1)]):
        run_id = tr.start_child(parent, {"run_name": f"{cell} | seed {seed}",
                                         "key": f"{cell}/{seed}", "grid": "table3",
                                         "cell": cell, "seed": seed, "config_hash": "h",
                                         "run": {"lr": 3e-5, "objective": {"method": "m"}}})
        scores = {m: 60.0 + 3.1 * i + 0.37 * j for j, m in enumerate(TEST_METRICS)}
        tr.log_result(run_id, {"step": 6, "stsb_dev": 70.0 + i, "loss/total": 1.5, **scores})
        tr.end(run_id)
        children[run_id] = {"cell": cell, "seed": str(seed), **scores}
    tr.end(parent)
    return uri, parent, children


def test_runs_view_run_page_and_compare_view_show_the_test_scores(tmp_path: Path) -> None:
    uri, parent, children = _store(tmp_path)
    seen = check_ui(uri, tmp_path / "ui.png")
    assert seen["problems"] == []
    assert seen["table"] == {"parent": parent, "name": "table3 (ui check)", "children": 4}
    assert seen["saved_view"] == "published by the check"
    # (a) the one-click runs view: every child with its cell, seed and stored scores
    view = seen["runs_view"]
    assert "viewStateShareKey=mmemb-" in view["url"]
    assert view["headers"] == ["mmemb.cell", "mmemb.seed", *TEST_METRICS]
    assert view["cells"] == ["KDMCSE", "MCSE"]
    assert set(view["rows"]) == set(children)
    for run_id, want in children.items():
        row = view["rows"][run_id]
        assert (row["cell"], row["seed"]) == (want["cell"], want["seed"])
        for m in TEST_METRICS:
            assert float(row[m]) == pytest.approx(want[m])
    # (b) a child's page
    page = seen["run_page"]
    assert float(page["metrics"]["test/avg"]) == pytest.approx(children[page["run"]]["test/avg"])
    assert set(page["metrics"]) == set(TEST_METRICS)
    # (c) the compare view: one value per compared run for every test score, in the link's order
    compare = seen["compare"]
    assert compare["runs"] == 4
    query = urllib.parse.urlsplit(compare["url"]).fragment.split("?", 1)[1]
    compared = json.loads(urllib.parse.parse_qs(query)["runs"][0])
    assert sorted(compared) == sorted(children)
    for m in TEST_METRICS:  # shown to 4 significant digits
        assert [float(v) for v in compare["metrics"][m]] == pytest.approx(
            [children[r][m] for r in compared], rel=1e-3)
    assert (tmp_path / "ui.png").stat().st_size > 20_000
    # the links printed for `mlflow ui` point at the same view and runs
    assert seen["links"]["runs"] == views.runs_url(views.DEFAULT_BASE, seen["experiment"],
                                                      parent)


def test_a_view_without_the_score_columns_is_reported(tmp_path: Path) -> None:
    """The runs table at the filter-only link has the UI's default columns: no scores, no tags."""
    uri, parent, children = _store(tmp_path)
    port = _free_port()
    proc = start_server(uri, port, tmp_path / "server.log")
    try:
        browser = Chromium(shutil.which("chromium") or "chromium")
        try:
            base = f"http://127.0.0.1:{port}"
            browser.goto(f"{base}/health")
            browser.wait_for("document.readyState", lambda s: s == "complete", 30)
            browser.evaluate(f"localStorage.setItem('{ASSISTANT_FIRST_VISIT}', 'true')")
            kids = [{"run_id": k, "name": f"{v['cell']} | seed {v['seed']}", "cell": v["cell"],
                     "seed": v["seed"], "metrics": {m: v[m] for m in TEST_METRICS}}
                    for k, v in children.items()]
            experiment = Tracker(uri).experiment_id
            seen = check_runs_view(browser, views.filter_url(base, experiment, parent), kids,
                                   timeout=5)
        finally:
            browser.close()
    finally:
        stop_server(proc)
    assert set(seen["rows"]) == set(children)  # the filter finds exactly the children...
    assert "runs view: no column metrics.`test/avg`" in seen["problems"]  # ...without scores
    assert any("test/avg shows None" in p for p in seen["problems"])
