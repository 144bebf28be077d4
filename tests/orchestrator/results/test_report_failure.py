"""An artifact store that refuses the report at the end of a table never hides finished work:
the table is printed, the report is written beside the MLflow store, the parent run is marked
FAILED with the reason, and the command to upload it again is named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator import ablate
from orchestrator.tracking.client import Tracker
from trainables.testing import write_tiny_profile

GRID = str(Path(__file__).parents[1] / "grid_tiny.py")


@pytest.fixture
def ray_session():
    import ray

    from trainables.runtime.ray_env import init_ray

    init_ray(num_cpus=2, log_to_driver=False)
    yield
    ray.shutdown()


def test_unwritable_artifact_store_keeps_the_finished_table(tmp_path, tiny_bert, ray_session,
                                                            monkeypatch, capsys):
    write_tiny_profile(tmp_path, tiny_bert, max_steps=3, eval_every=3)
    db = tmp_path / "mlflow.db"

    def refuse(self, run_id, path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(Tracker, "log_artifact_file", refuse)
    rc = ablate.main(["--grid", GRID, "--profile", str(tmp_path / "tiny.yaml"),
                      "--storage", str(tmp_path / "runs"), "--tracking-uri", f"sqlite:///{db}"])
    out, err = capsys.readouterr()
    assert rc == 1, err[-3000:]
    tr = Tracker(f"sqlite:///{db}")
    (parent,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
    pid = parent.info.run_id
    # 1. the table is printed
    assert re.search(r"^\| KDMCSE \|", out, re.M) and re.search(r"^\| MCSE", out, re.M), out
    # 2. the report is on disk beside the store
    report = tmp_path / "reports" / f"tiny-{pid[:8]}"
    assert {"report.md", "report.csv", "report.png"} <= {p.name for p in report.iterdir()}
    assert f"report: {report}/report.md" in out
    # 3. the parent says it failed, and why
    assert parent.info.status == "FAILED"
    assert "PermissionError" in parent.data.tags["mmemb.report_error"]
    assert all(c.info.status == "FINISHED" for c in tr.children(pid))  # the runs themselves did
    # 4. the command that uploads it again is named
    assert f"python -m orchestrator.report --run {pid}" in err
    assert str(report) in err
