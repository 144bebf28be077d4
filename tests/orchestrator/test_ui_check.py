"""The MLflow UI shows a table's runs, checked in a real headless Chromium (slow: starts a server)."""

from __future__ import annotations

import shutil

import pytest

from orchestrator.tracking import Tracker
from orchestrator.ui_check import check_ui


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="apt-get install chromium")
def test_ui_lists_the_parent_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tr = Tracker(uri)
    parent, _ = tr.start_parent("table3 (ui check)", "table", "plan", {}, resume=False)
    for seed in (0, 1):
        tr.start_child(parent, {"run_name": f"KDMCSE | seed {seed}", "key": f"kdmcse/seed-{seed}",
                                "grid": "table3", "cell": "KDMCSE", "seed": seed,
                                "config_hash": "abc", "run": {"lr": 3e-5}})
    seen = check_ui(uri, tmp_path / "ui.png")
    assert seen["parents"] == 1 and seen["children"] == 2
    assert seen["parent_names_in_page"] == ["table3 (ui check)"]
    assert (tmp_path / "ui.png").stat().st_size > 20_000
