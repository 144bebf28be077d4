"""A group's servers, as docs/team.md sets them up (issue 48): the tiny table through
``mlflow server`` on PostgreSQL with artifacts in S3, on PostgreSQL directly, with its
checkpoints in S3 (both endpoint forms), a search whose study is in PostgreSQL, and two tables at
once into one server. Each equals the same table on SQLite, holds every student in MLflow, and
``report``, ``best`` and ``ui_links`` work on it. Slow: each table takes minutes on 2 cores."""

from __future__ import annotations

import importlib.util
import shutil
import threading
from pathlib import Path

import pytest

from tests.team.conftest import GRID_B, TRIALS
from tests.team.reading import has_model, numbers, parent_of, running, table_of
from tests.team.servers import KEYS

pytestmark = pytest.mark.slow


def _after_table(group, cwd: Path, uri: str, out: str, reference: dict | None,
                 env: dict[str, str] | None = None) -> str:
    """What every table here must show: the numbers of the SQLite run, every student in MLflow,
    nothing RUNNING, no password on the console; and report, best, ui_links on it."""
    from tests.team.servers import PASSWORD

    tr, parent, kids = table_of(uri, out)
    assert sorted(kids) == sorted(TRIALS if reference is not None else kids)
    assert all(c.info.status == "FINISHED" for c in kids.values())
    if reference is not None:
        assert {k: numbers(c) for k, c in kids.items()} == reference
    missing = [k for k, c in kids.items() if not has_model(tr, c)]
    assert not missing, f"no student in MLflow for {missing}"
    assert not running(tr)
    assert PASSWORD not in out
    env = env or group.env(keys=False)  # a server's clients need no S3 keys
    rep = group.run("orchestrator.report", "--run", parent, "--tracking-uri", uri, cwd=cwd,
                    env=env)
    assert rep.returncode == 0, rep.stderr[-2000:]
    best = group.run("orchestrator.best", "--run", parent, "--cell", "MCSE", "--tracking-uri",
                     uri, "--out", str(cwd / "student"), cwd=cwd, env=env)
    assert best.returncode == 0, best.stderr[-2000:]
    assert any((cwd / "student").rglob("config.json")), best.stdout
    links = group.run("orchestrator.ui_links", "--run", parent, "--tracking-uri", uri, cwd=cwd,
                      env=env)
    assert links.returncode == 0, links.stderr[-2000:]
    if uri.startswith("http"):  # a server is its own UI
        assert uri in links.stdout and "127.0.0.1:5000" not in links.stdout, links.stdout
    assert PASSWORD not in rep.stdout + best.stdout + links.stdout
    if importlib.util.find_spec("playwright") and shutil.which("chromium"):  # the `ui` extra
        ui = group.run("orchestrator.ui_check", "--run", parent, "--tracking-uri", uri,
                       "--out", str(cwd / "ui.png"), cwd=cwd, env=env)
        assert ui.returncode == 0, ui.stderr[-2000:]
    else:
        print("\n[team] ui_check not run: pip install playwright and apt-get install chromium")
    return parent


def test_a_table_through_the_server_with_checkpoints_in_s3(group, reference, tmp_path):
    """The server's URI (no S3 keys needed for MLflow: the server holds them); Ray's
    checkpoints in the bucket through AWS_ENDPOINT_URL."""
    env = group.env(AWS_ENDPOINT_URL=group.s3.endpoint)
    done = group.table(tmp_path, group.mlflow.uri, "s3://runs/server", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    _after_table(group, tmp_path, group.mlflow.uri, done.stdout, reference)
    assert group.s3.objects("artifacts", "mlflow/"), "no model in the server's bucket"
    assert group.s3.objects("runs", "server/"), "Ray's state not in the bucket"


def test_postgresql_directly_with_the_endpoint_in_the_storage_uri(group, reference, tmp_path,
                                                                 monkeypatch):
    """``--tracking-uri postgresql://`` (no server) with ``--artifact-location s3://...``, the
    checkpoints in S3 named with ``?endpoint_override=HOST:PORT&scheme=http``; the dry run says
    where artifacts go; the password never printed."""
    uri = group.pg.uri("direct")
    storage = f"s3://runs/direct?endpoint_override=127.0.0.1:{group.s3.port}&scheme=http"
    env = group.env(MLFLOW_S3_ENDPOINT_URL=group.s3.endpoint)  # this client writes the bucket
    for k, v in {**KEYS, "MLFLOW_S3_ENDPOINT_URL": group.s3.endpoint}.items():
        monkeypatch.setenv(k, v)  # and so does this test, reading the students back
    where = ("--artifact-location", "s3://artifacts/direct")
    dry = group.table(tmp_path, uri, storage, *where, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "artifacts of a new experiment in s3://artifacts/direct" in dry.stdout, dry.stdout
    done = group.table(tmp_path, uri, storage, *where, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    _after_table(group, tmp_path, uri, done.stdout + done.stderr, reference, env=env)
    assert group.s3.objects("artifacts", "direct/"), "the students are not in the bucket"


@pytest.mark.parametrize("problem", ["password", "database", "host"])
def test_the_dry_run_refuses_a_database_that_will_not_take_the_table(group, tmp_path, problem):
    """One line within seconds, password masked, no traceback; for the tracking store and the
    study store alike."""
    from tests.team.servers import PASSWORD, free_port

    uri = {"password": group.pg.uri("direct", password="wrong-pw"),
           "database": group.pg.uri("nosuch"),
           "host": group.pg.uri("direct").replace(str(group.pg.port), str(free_port()))}[problem]
    done = group.table(tmp_path, uri, str(tmp_path / "runs"), "--dry-run")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr and PASSWORD not in done.stderr
    assert "wrong-pw" not in done.stderr and ":***@" in line, line
    assert {"password": "refused the password", "database": "no database 'nosuch'",
            "host": "cannot connect"}[problem] in line, line


def test_a_search_with_its_study_in_postgresql(group, tmp_path):
    """The Optuna study in PostgreSQL; the search's runs in the server."""
    study = group.pg.uri("study")
    done = group.run("orchestrator.search", "--space", "kdmcse_search", "--profile",
                     str(group.space / "tiny.yaml"), "--num-samples", "2", "--search-seeds", "0",
                     "--finalists", "2", "--finalist-seeds", "10", "--confirm-seeds", "7", "8",
                     "--storage", str(tmp_path / "runs"), "--tracking-uri", group.mlflow.uri,
                     "--study-storage", study, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    import optuna

    from tests.team.servers import PASSWORD

    assert PASSWORD not in done.stdout + done.stderr
    (summary,) = optuna.study.get_all_study_summaries(study)
    assert summary.n_trials >= 2, summary.n_trials
    tr, parent, kids = table_of(group.mlflow.uri, done.stdout)
    assert kids and all(c.info.status == "FINISHED" for c in kids.values())
    assert tr.client.get_run(parent).info.status == "FINISHED"
    assert not running(tr)


def test_two_tables_at_once_into_one_server(group, reference, tmp_path):
    """Two different tables (two grids) written at the same time into one server: each has
    exactly its own runs, the first equal to the SQLite table. Their users hold no S3 keys:
    the server writes the bucket."""
    results: dict[str, object] = {}

    def one(name: str, grid: str | None) -> None:
        extra = {"grid": grid} if grid else {}
        results[name] = group.table(tmp_path / name, group.mlflow.uri,
                                    str(tmp_path / name / "runs"), env=group.env(keys=False),
                                    **extra)

    threads = [threading.Thread(target=one, args=("a", None)),
               threading.Thread(target=one, args=("b", GRID_B))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = results["a"], results["b"]
    assert a.returncode == 0, a.stderr[-3000:]
    assert b.returncode == 0, b.stderr[-3000:]
    pa = _after_table(group, tmp_path / "a", group.mlflow.uri, a.stdout, reference)
    pb = _after_table(group, tmp_path / "b", group.mlflow.uri, b.stdout, None)
    assert pa != pb
    _, _, kids_b = table_of(group.mlflow.uri, b.stdout)
    assert {c.data.tags["mmemb.grid"] for c in kids_b.values()} == {"tiny_other"}
    assert parent_of(a.stdout) == pa
