"""Ctrl-C during a search stops the search: no winner from half a round, no confirmation, the
MLflow parent KILLED, exit 130; ``--resume`` then finishes it with one child per run.

The search runs as ``python -m orchestrator.search`` in its own session, and Ctrl-C is SIGINT to
that process group, as a terminal sends it. Slow: two searches with Ray starts (minutes on 2
shared cores)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from orchestrator.tracking.client import Tracker
from tests.ctrl_c import sigint_as_at_a_terminal
from tests.orchestrator.run.test_resilience import kill_tagged
from tests.waiting import wait_for
from trainables.testing import write_tiny_profile

ROOT = Path(__file__).resolve().parents[2]


def _search(d: Path, tag: str, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "orchestrator.search", "--space", "kdmcse_search",
            "--profile", str(d / "tiny.yaml"), "--num-samples", "4", "--search-seeds", "0", "1",
            "--finalists", "2", "--finalist-seeds", "10", "--confirm-seeds", "7", "8",
            "--storage", str(d / "runs"), "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MMEMB_TEST_TAG": tag}
    out = (d / f"{tag}.out").open("w")
    return subprocess.Popen(argv, cwd=d, env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=sigint_as_at_a_terminal)


def _parent_logged(db: Path) -> bool:
    """Read-only: the search has created its MLflow store and parent run. Opening the store with
    MlflowClient any earlier migrates it a second time while the search does (alembic fails)."""
    if not db.exists():
        return False
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute("SELECT 1 FROM tags WHERE key = 'mmemb.kind' AND value = 'search'"
                           ).fetchone() is not None
    except sqlite3.OperationalError:  # tables not created yet
        return False
    finally:
        con.close()


def _runs(d: Path):
    if not _parent_logged(d / "mlflow.db"):
        return None, []
    tr = Tracker(f"sqlite:///{d / 'mlflow.db'}")
    (parent,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'search'")
    return parent, tr.children(parent.info.run_id)


@pytest.mark.slow
def test_ctrl_c_stops_the_search_and_resume_finishes_it(tmp_path, tiny_bert):
    write_tiny_profile(tmp_path, tiny_bert, max_steps=60, eval_every=2)
    tag = uuid.uuid4().hex
    proc = _search(tmp_path, tag)
    try:
        def curve_started():  # a dev evaluation reached MLflow: the round is under way
            if proc.poll() is not None:
                out = (tmp_path / f"{tag}.out").read_text()
                raise AssertionError(f"the search ended (exit {proc.returncode}) first:\n{out[-3000:]}")
            _, kids = _runs(tmp_path)
            return any("stsb_dev" in k.data.metrics for k in kids)

        wait_for(curve_started, "the first dev evaluation of the search's first round")
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=900)
    finally:
        kill_tagged(tag)
    out = (tmp_path / f"{tag}.out").read_text()
    assert rc == 130, out[-3000:]
    assert "--resume" in out
    parent, kids = _runs(tmp_path)
    assert parent.info.status == "KILLED"
    keys = [k.data.tags["mmemb.trial"] for k in kids]
    assert not any(k.startswith(("final/", "confirm/")) for k in keys), keys  # nothing went on
    assert all(k.info.status != "RUNNING" for k in kids)

    tag2 = uuid.uuid4().hex
    proc = _search(tmp_path, tag2, "--resume")
    try:
        rc = proc.wait(timeout=1800)
    finally:
        kill_tagged(tag2)
    out = (tmp_path / f"{tag2}.out").read_text()
    assert rc == 0, out[-3000:]
    parent2, kids = _runs(tmp_path)
    assert parent2.info.run_id == parent.info.run_id and parent2.info.status == "FINISHED"
    counts = Counter(k.data.tags["mmemb.trial"] for k in kids if k.info.status == "FINISHED")
    assert sum(k.startswith("search/") for k in counts) == 8  # 4 configurations x 2 seeds
    assert sum(k.startswith("confirm/") for k in counts) == 4
    assert max(counts.values()) == 1, counts  # no run finished twice
