"""Faults against a group's servers mid-table (issue 48): PostgreSQL stopped for 30 s and
started again, the S3 server unreachable for 30 s, the MLflow server killed and restarted. The
table finishes, or keeps its results in the journal and names the one command to run; after
that command nothing is lost (every run FINISHED, with its scores and its student), nothing is
duplicated (each run once, each dev point once) and nothing is left RUNNING. The outcome of
each is printed (``pytest -s``) for docs/resilience.md. Slow: a table of minutes each."""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.team.conftest import TRIALS
from tests.team.reading import has_model, running, table_of
from tests.waiting import wait_for
from trainables.testing import write_tiny_profile

pytestmark = pytest.mark.slow
OUTAGE_S = 30.0
"""how long each server stays away (the issue's figure)"""


@pytest.fixture(scope="module")
def long_space(group, tmp_path_factory, tiny_bert) -> Path:
    """A tiny table long enough to be hit mid-training: 40 steps, a dev point every 4."""
    d = tmp_path_factory.mktemp("faults-space")
    write_tiny_profile(d, tiny_bert, max_steps=40, eval_every=4)
    return d


def _dev_points(uri: str, out: Path) -> bool:
    """A child of this table (its parent named in ``out``) has a dev point: it is training."""
    from mlflow.tracking import MlflowClient

    found = re.findall(r"MLflow parent run ([0-9a-f]{32})", out.read_text())
    if not found:
        return False
    try:
        c = MlflowClient(uri)
        exp = c.get_experiment_by_name("mmemb")
        return bool(exp and c.search_runs(
            [exp.experiment_id],
            f"tags.mlflow.parentRunId = '{found[-1]}' and metrics.stsb_dev > -10", max_results=1))
    except Exception:
        return False


def _fault_table(group, space: Path, cwd: Path, storage: str, fault: Callable[[], None],
                 heal: Callable[[], None], env: dict[str, str] | None = None) -> str:
    """Run the long table, apply ``fault`` once it trains, ``heal`` after OUTAGE_S; finish it
    with the one command it names (if any). -> what happened, in one line."""
    cwd.mkdir(parents=True, exist_ok=True)
    argv = ["--profile", str(space / "tiny.yaml")]
    proc = group.popen_table(cwd, group.mlflow.uri, storage, "run", *argv, env=env)
    try:
        wait_for(lambda: _dev_points(group.mlflow.uri, cwd / "run.out") or
                 proc.poll() is not None,
                 "a first dev point in the server", limit_s=1800, poll_s=1)
        assert proc.poll() is None, (cwd / "run.err").read_text()[-3000:]
        fault()
        time.sleep(OUTAGE_S)  # the outage itself, not a wait for a condition
        heal()
        rc = proc.wait(1800)
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = (cwd / "run.out").read_text(), (cwd / "run.err").read_text()
    assert "Traceback" not in err, err[-3000:]
    said = f"rc {rc}"
    if rc != 0:
        assert rc == 3, err[-3000:]
        (sync,) = [line.strip() for line in err.splitlines()
                   if line.strip().startswith("python -m orchestrator.sync")]
        done = group.run(*shlex.split(sync)[2:], cwd=cwd)
        assert done.returncode == 0, done.stderr[-3000:]
        said += f"; ran `{re.sub(r'/[^ ]*/', '.../', sync)}`: rc 0"
    tr, parent, kids = table_of(group.mlflow.uri, out)
    assert sorted(kids) == sorted(TRIALS), sorted(kids)
    for key, c in kids.items():
        assert c.info.status == "FINISHED", (key, c.info.status)
        assert "test/avg" in c.data.metrics, key
        steps = [m.step for m in tr.client.get_metric_history(c.info.run_id, "stsb_dev")]
        assert steps == sorted(set(steps)) and steps, (key, steps)  # each dev point once
        assert has_model(tr, c), f"no student in MLflow for {key}"
    assert not running(tr), running(tr)
    print(f"\n[team fault] {said}; parent {tr.client.get_run(parent).info.status}, 4 runs "
          "FINISHED with scores and students, dev points once each, nothing RUNNING", flush=True)
    return said


def test_postgresql_stopped_30s_mid_table(group, long_space, tmp_path):
    _fault_table(group, long_space, tmp_path, str(tmp_path / "runs"),
                 group.pg.stop, group.pg.start)


def test_s3_unreachable_30s_mid_table(group, long_space, tmp_path):
    """Ray's checkpoints and MLflow's artifacts both live in the bucket that goes away."""
    env = group.env(AWS_ENDPOINT_URL=group.s3.endpoint)
    _fault_table(group, long_space, tmp_path, "s3://runs/fault", group.s3.pause,
                 group.s3.resume, env=env)


def test_mlflow_server_killed_and_restarted_mid_table(group, long_space, tmp_path):
    _fault_table(group, long_space, tmp_path, str(tmp_path / "runs"),
                 group.mlflow.kill, group.mlflow.start)
