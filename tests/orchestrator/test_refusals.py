"""Issue 19, as a hostile new user tries it: every bad input gets one ``error:`` line naming the
file or option, the value and the fix, a non-zero exit, before Ray starts, with nothing written.

One test (or parametrized case) per row of the issue's table that needs no training; the rows
that need a running table (two drivers at once, a full disk, SIGTERM, a hostile name end to end)
are in ``tests/orchestrator/run/test_driver.py`` and ``tests/orchestrator/run/test_faults.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from orchestrator import ablate, best, report, sync, ui_links
from tests.ctrl_c import sigint_as_at_a_terminal
from tests.orchestrator.refusing import refused, run_in
from tests.waiting import wait_for
from trainables import train
from trainables.config.run_config import RunConfig, load_yaml
from trainables.runtime.checks import leaf_fields
from trainables.testing import write_tiny_profile


@pytest.fixture(scope="module")
def space(tmp_path_factory, tiny_bert) -> Path:
    d = tmp_path_factory.mktemp("refusals")
    write_tiny_profile(d, tiny_bert)
    return d


def table(space: Path, work: Path, *extra: str, profile: str | None = None) -> list[str]:
    return ["--grid", "table3", "--profile", profile or str(space / "tiny.yaml"),
            "--storage", str(work / "runs"), "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}",
            *extra]


# --- row 1: a profile with nonsense values ------------------------------------------------------
PROFILE_ROW = [("lr", ".nan"), ("lr", ".inf"), ("max_length", "0"), ("max_length", "-5"),
               ("eval_batch_size", "0"), ("proj_dim", "0"), ("grad_clip", "-1"),
               ("weight_decay", "-5"), ("adam_eps", "-1"), ("num_workers", "0")]


@pytest.mark.parametrize(("key", "value"), PROFILE_ROW, ids=[f"{k}={v}" for k, v in PROFILE_ROW])
def test_a_profile_with_a_nonsense_value_is_refused_by_the_dry_run(key, value, space, tmp_path,
                                                                   capsys, monkeypatch):
    bad = tmp_path / "bad.yaml"
    profile = yaml.safe_load((space / "tiny.yaml").read_text())
    profile[key] = yaml.safe_load(value)  # replaced, not appended: a key given twice is refused
    bad.write_text(yaml.safe_dump(profile))
    line = refused(tmp_path, ablate.main, table(space, tmp_path, "--dry-run", profile=str(bad)),
                   f"config file {bad}: {key}=", capsys, monkeypatch)
    assert "must be" in line and line.endswith("fix it in that file"), line


FIELD_CASES = [(k, b) for k, chk in leaf_fields(RunConfig) for b in chk.bad_values()]


@pytest.mark.parametrize(("key", "bad"), FIELD_CASES, ids=[f"{k}={b!r}" for k, b in FIELD_CASES])
def test_the_profile_loader_refuses_every_fields_bad_values(key, bad, tmp_path):
    """Generated from the config fields, as ``tests/trainables/runtime/test_checks.py`` is for overrides:
    a profile file is refused at load time, naming itself and the setting."""
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump({key: bad}))
    with pytest.raises(ValueError) as e:
        load_yaml(f)
    msg = str(e.value)
    assert msg.startswith(f"config file {f}: ") and key.split(".")[-1] in msg and "\n" not in msg


# --- row 2: trainables.train overrides -------------------------------------------------------
@pytest.mark.parametrize(("override", "message"), [
    ("max_length=0", "max_length=0 must be an integer >= 3"),
    ("seed=-1", "seed=-1 must be an integer >= 0"),
    ("lr=nan", "lr=nan must be a finite number > 0"),
    ("num_workers=1000", "num_workers=1000 needs 1000 CPUs"),
])
def test_train_overrides_are_refused_before_ray(override, message, tmp_path, capsys, monkeypatch):
    extra = ["batch_size=1000"] if override.startswith("num_workers") else []
    refused(tmp_path, train.main, ["--profile", "demo", "--storage", str(tmp_path / "runs"),
                                   override, *extra], message, capsys, monkeypatch)


# --- rows 3 and 4: resources --------------------------------------------------------------------
def test_gpus_per_trial_nan_is_refused(space, tmp_path, capsys, monkeypatch):
    refused(tmp_path, ablate.main, table(space, tmp_path, "--dry-run", "--gpus-per-trial", "nan"),
            "argument --gpus-per-trial: nan must be a finite number >= 0", capsys, monkeypatch)


def test_workers_beyond_this_machine_are_refused(space, tmp_path, capsys, monkeypatch, tiny_bert):
    """num_workers Train workers of --cpus-per-trial CPUs each: 2x the machine's CPUs cannot
    be placed (the run used to hang with its MLflow runs RUNNING)."""
    n = 2 * (os.cpu_count() or 1)
    (tmp_path / "p").mkdir()
    write_tiny_profile(tmp_path / "p", tiny_bert, num_workers=n, batch_size=2 * n)
    prof = str(tmp_path / "p" / "tiny.yaml")
    work = tmp_path / "w"
    work.mkdir()
    line = refused(work, ablate.main, table(space, work, "--dry-run", profile=prof),
                   f"num_workers={n} Train workers x (--cpus-per-trial 1) need {n} CPUs per array "
                   f"but this machine has {os.cpu_count()} CPUs", capsys, monkeypatch)
    assert f"set num_workers={os.cpu_count()} or less" in line
    # a cell that asks for them is named
    grid = tmp_path / "g.py"
    grid.write_text(
        "from orchestrator.spec.grids import Cell, Grid\n"
        "GRID = Grid(name='g', title='t', baseline='MCSE', seeds=(0, 1), cells=(\n"
        "    Cell('MCSE', {'objective.method': 'mcse'}),\n"
        f"    Cell('WIDE', {{'objective.method': 'mcse', 'num_workers': {n}, "
        f"'batch_size': {2 * n}}})))\n")
    argv = ["--grid", str(grid), *table(space, work, "--dry-run")[2:]]
    refused(work, ablate.main, argv, "cell(s) ['WIDE']: num_workers=", capsys, monkeypatch)


# --- row 5: a grid file is checked as --list checks a named grid ---------------------------------
GRID_HEAD = "from orchestrator.spec.grids import Cell, Grid\n"
GRID_FILES = {
    "duplicate-cells": (GRID_HEAD + "GRID = Grid(name='mine', title='t', baseline='A', cells=(\n"
                        "    Cell('A', {'objective.method': 'mcse'}),\n"
                        "    Cell('A', {'objective.method': 'kdmcse'})))\n",
                        "duplicate cell names ['A']"),
    "published-key": (GRID_HEAD + "GRID = Grid(name='mine', title='t', baseline='A', cells=(\n"
                      "    Cell('A', {'objective.method': 'mcse'}, published={'STS99': 70.0}),))\n",
                      "published STS99=70.0 must be finite, keyed by a column"),
    "raises-at-import": (GRID_HEAD + "x = 1\nraise RuntimeError('no such table')\n",
                         "line 3: RuntimeError: no such table; fix that file"),
    "divides-by-zero": (GRID_HEAD + "SEEDS = 1 / 0\n", "line 2: ZeroDivisionError: division by zero"),
    "not-a-grid": ("GRID = {'name': 'mine'}\n", "GRID is a dict, not a Grid"),
    "long-cell-name": (GRID_HEAD + "GRID = Grid(name='mine', title='t', baseline='A', cells=(\n"
                       "    Cell('A', {'objective.method': 'mcse'}),\n"
                       "    Cell('B' * 310, {'objective.method': 'kdmcse'})))\n",
                       "is 310 characters; names become MLflow run names and folder names"),
    "bad-setting": (GRID_HEAD + "GRID = Grid(name='mine', title='t', baseline='A', cells=(\n"
                    "    Cell('A', {'objective.method': 'mcse', 'lr': -1}),))\n",
                    "cell 'A': invalid run config: lr=-1.0 must be a finite number > 0"),
}


@pytest.mark.parametrize("case", sorted(GRID_FILES))
def test_a_grid_file_is_validated_like_a_named_grid(case, space, tmp_path, capsys, monkeypatch):
    text, message = GRID_FILES[case]
    work = tmp_path / "work"
    work.mkdir()
    path = tmp_path / "my_grid.py"
    path.write_text(text)
    argv = ["--grid", str(path), *table(space, work, "--dry-run")[2:]]
    line = refused(work, ablate.main, argv, message, capsys, monkeypatch)
    assert str(path) in line


def test_a_grid_importing_a_broken_method_file_names_the_method_file(space, tmp_path, capsys,
                                                                     monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "my_method.py").write_text("import math\n\nWEIGHT = math.sqrt(undefined)\n")
    path = tmp_path / "my_grid.py"
    path.write_text("import my_method  # noqa: F401\n" + GRID_FILES["bad-setting"][0])
    argv = ["--grid", str(path), *table(space, work, "--dry-run")[2:]]
    line = refused(work, ablate.main, argv, f"{tmp_path / 'my_method.py'}: line 3: NameError: "
                   f"name 'undefined' is not defined; fix that file (imported by {path})",
                   capsys, monkeypatch)
    assert line.startswith(f"error: {tmp_path / 'my_method.py'}"), line


# --- rows 8 and 9: what --resume finds ----------------------------------------------------------
def _store_with_table(space: Path, work: Path, seeds: list[int], hashes: str = "same",
                      finished: tuple[int, ...] = ()):
    """A store holding a table of table3 on ``seeds`` (its parent and one child per run), as an
    interrupted run leaves it, the runs of ``finished`` seeds FINISHED; ``hashes='old'``: made
    by an older mmemb (no plan.json, other config hashes)."""
    from orchestrator.spec.plan import plan_id, plan_runs, plan_summary
    from orchestrator.spec.registry import load_grid
    from orchestrator.tracking.client import Tracker

    grid = load_grid("table3")
    prof = str(space / "tiny.yaml")
    members = plan_runs(grid, prof, seeds)
    tr = Tracker(f"sqlite:///{work / 'mlflow.db'}")
    pid = plan_id("table", grid.name, members, "tiny")
    summary = plan_summary(members, "tiny", prof) if hashes == "same" else None
    parent = tr.start_parent("table3 (demo)", "table", pid if hashes == "same" else "0ld",
                             {"mmemb.grid": grid.name, "mmemb.profile": prof}, summary=summary)
    if hashes != "same":
        tr.log_artifact_text(parent, "grid.json", json.dumps({"cells": [c.name for c in grid.cells],
                                                              "seeds": seeds}))
    for m in members:
        child = tr.start_child(parent, {"key": m.key, "cell": m.cell, "seed": m.seed,
                                        "grid": grid.name, "run_name": m.run_name,
                                        "config_hash": m.config_hash if hashes == "same" else "0" * 12,
                                        "run": {"seed": m.seed}})
        if m.seed in finished:
            tr.end(child)
    tr.end(parent, "KILLED")
    return parent


def test_resume_with_other_seeds_says_how_the_plan_differs(space, tmp_path, capsys, monkeypatch):
    # Seeds 2 3 do not contain the interrupted 0 1 (a superset would extend its parent, reusing
    # its finished runs: tests/orchestrator/tracking/test_extend.py).
    parent = _store_with_table(space, tmp_path, [0, 1])
    line = refused(tmp_path, ablate.main, table(space, tmp_path, "--seeds", "2", "3",
                                                 "--resume"),
                   f"the latest of 'kdmcse_table3' (parent {parent}, KILLED, 0 runs finished) has "
                   "another plan: seeds 0 1 there, 2 3 here", capsys, monkeypatch)
    assert "Nothing is retrained: run with --seeds 0 1 to resume it, with --seeds 0 1 2 3 to " \
        "extend it with this command's runs, or drop --resume" in line


def test_resume_dry_run_lists_what_is_done_and_only_what_would_train(space, tmp_path, capsys,
                                                                      monkeypatch):
    parent = _store_with_table(space, tmp_path, [0, 1], finished=(0,))
    before = sorted(p.name for p in tmp_path.iterdir())
    rc, out, err = run_in(tmp_path, ablate.main, table(space, tmp_path, "--seeds", "0", "1",
                                                       "--resume", "--dry-run"), capsys, monkeypatch)
    assert rc == 0, err[-3000:]
    assert (f"--resume would continue parent run {parent}: 4 of 8 runs done (MCSE seed 0; "
            "KDMCSE seed 0; without AdapACSE seed 0; without threshold filtering seed 0), "
            "4 would train (below)") in out, out
    listed = [ln.split()[0] for ln in out.splitlines() if ln.startswith("  ") and "/seed-" in ln]
    assert len(listed) == 4 and all(k.endswith("seed-1") for k in listed), listed
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_resume_of_a_store_from_an_older_version_says_the_hashes_changed(space, tmp_path, capsys,
                                                                         monkeypatch):
    _store_with_table(space, tmp_path, [0, 1], hashes="old")
    refused(tmp_path, ablate.main, table(space, tmp_path, "--seeds", "0", "1", "--resume"),
            "every run's config hash differs: the settings changed", capsys, monkeypatch)


def test_resume_where_nothing_ran_says_so(space, tmp_path, capsys, monkeypatch):
    refused(tmp_path, ablate.main, table(space, tmp_path, "--seeds", "0", "1", "--resume"),
            "--resume: nothing to resume: no MLflow store at", capsys, monkeypatch)
    from orchestrator.tracking.client import Tracker

    Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")  # a store, but no table in it
    refused(tmp_path, ablate.main, table(space, tmp_path, "--seeds", "0", "1", "--resume"),
            "holds no table of 'kdmcse_table3'; run without --resume to start it", capsys,
            monkeypatch)


# --- row 11: a server that answers /health but refuses the client ----------------------------
class _Refusing(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        ok = self.path.rstrip("/") == "/health"
        body = b"OK" if ok else b"Invalid Host header - possible DNS rebinding attack detected"
        self.send_response(200 if ok else 403)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


@pytest.fixture
def refusing_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_server_refusing_the_client_fails_the_start_check(refusing_server, space, tmp_path,
                                                             capsys, monkeypatch):
    argv = table(space, tmp_path, "--dry-run")
    argv[argv.index("--tracking-uri") + 1] = refusing_server
    host = refusing_server.removeprefix("http://")
    line = refused(tmp_path, ablate.main, argv, "answers /health but refuses this client (403",
                   capsys, monkeypatch)
    assert f"--allowed-hosts '{host}'" in line
    for main, args in ((best.main, ["--run", "0" * 32, "--cell", "MCSE"]),
                       (report.main, ["--run", "0" * 32]), (ui_links.main, ["--run", "0" * 32])):
        refused(tmp_path, main, [*args, "--tracking-uri", refusing_server], "--allowed-hosts",
                capsys, monkeypatch)


# --- row 12: read-only commands -------------------------------------------------------------------
@pytest.mark.parametrize("command", ["best", "report", "ui_links"])
def test_a_missing_store_or_run_is_one_line_and_creates_no_store(command, tmp_path, capsys,
                                                                 monkeypatch):
    main = {"best": best.main, "report": report.main, "ui_links": ui_links.main}[command]
    args = ["--run", "0123abcd" * 4] + (["--cell", "MCSE"] if command == "best" else [])
    refused(tmp_path, main, args, f"no MLflow store at {tmp_path / 'mlflow.db'}", capsys,
            monkeypatch)  # the default store: ./mlflow.db, not created
    from orchestrator.tracking.client import Tracker

    Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    refused(tmp_path, main, args, f"no run {'0123abcd' * 4} in sqlite:///", capsys, monkeypatch)


@pytest.fixture(scope="module")
def a_table(tmp_path_factory) -> tuple[Path, str, str]:
    """A store with a finished table: one parent, one child with a model tag (no training)."""
    from orchestrator.tracking.client import Tracker

    d = tmp_path_factory.mktemp("a-table")
    tr = Tracker(f"sqlite:///{d / 'mlflow.db'}")
    parent = tr.start_parent("table3 (demo)", "table", "plan", {"mmemb.grid": "kdmcse_table3"})
    child = tr.start_child(parent, {"key": "mcse/seed-0", "cell": "MCSE", "seed": 0,
                                    "grid": "kdmcse_table3", "config_hash": "0" * 12,
                                    "run_name": "MCSE | seed 0", "run": {"seed": 0}})
    tr.log_result(child, {"test/avg": 70.0, "step": 3})
    tr.client.set_tag(child, "mmemb.model", f"runs:/{child}/model")
    tr.end(child)
    tr.end(parent)
    return d, parent, child


def test_best_is_a_question_that_writes_nothing(a_table, tmp_path, capsys, monkeypatch):
    d, parent, child = a_table
    db = d / "mlflow.db"
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    rc, out, err = run_in(tmp_path, best.main, ["--run", parent, "--cell", "MCSE", "--tracking-uri",
                                             f"sqlite:///{db}"], capsys, monkeypatch)
    assert rc == 0, err
    assert f"cell MCSE: seed 0, test/avg 70.00, child run {child}" in out
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest  # no experiment tag written
    assert not list(tmp_path.iterdir())


def test_best_refuses_an_unwritable_out_and_a_child_run(a_table, tmp_path, capsys, monkeypatch):
    d, parent, child = a_table
    uri = f"sqlite:///{d / 'mlflow.db'}"
    refused(tmp_path, best.main, ["--run", parent, "--cell", "MCSE", "--tracking-uri", uri,
                                  "--out", "/proc/x"],
            "--out /proc/x: /proc is not a writable folder", capsys, monkeypatch)
    refused(tmp_path, report.main, ["--run", parent, "--tracking-uri", uri, "--out", "/proc/x"],
            "--out /proc/x: /proc is not a writable folder", capsys, monkeypatch)
    refused(tmp_path, ui_links.main, ["--run", child, "--tracking-uri", uri],
            f"run {child} is a child run (its parent is {parent})", capsys, monkeypatch)


# --- row 13: sync prints runnable commands ------------------------------------------------------
def test_sync_prints_the_real_parent_and_never_suggests_another_store(a_table, tmp_path, capsys,
                                                                      monkeypatch):
    from orchestrator.results.browser_check import _free_port

    d, parent, child = a_table
    journal = tmp_path / "mlflow-journal-plan.jsonl"
    journal.write_text(json.dumps({"op": "parent", "parent": parent}) + "\n"
                       + json.dumps({"op": "set_tag", "handle": child, "key": "mmemb.note",
                                     "value": "synced"}) + "\n")
    closed = f"http://127.0.0.1:{_free_port()}"
    line = refused(tmp_path, sync.main, [str(journal), "--tracking-uri", closed], "unreachable",
                   capsys, monkeypatch)
    assert "drop --tracking-uri" not in line and "start it again" in line
    uri = f"sqlite:///{d / 'mlflow.db'}"
    rc, out, err = run_in(tmp_path, sync.main, [str(journal), "--tracking-uri", uri], capsys,
                       monkeypatch)
    assert rc == 0, err
    assert f"python -m orchestrator.report --run {parent} --tracking-uri {uri}" in out
    assert "PARENT_RUN_ID" not in out


def test_a_journal_without_its_header_still_names_its_parent(a_table, tmp_path, capsys,
                                                             monkeypatch):
    d, parent, child = a_table
    journal = tmp_path / "j.jsonl"
    journal.write_text(json.dumps({"op": "set_tag", "handle": child, "key": "k", "value": "v"})
                       + "\n")
    rc, out, err = run_in(tmp_path, sync.main, [str(journal), "--tracking-uri",
                                             f"sqlite:///{d / 'mlflow.db'}"], capsys, monkeypatch)
    assert rc == 0 and f"--run {parent}" in out, err


# --- the search's own store -----------------------------------------------------------------------
@pytest.mark.parametrize(("url", "message"), [
    ("not a url", "--study-storage not a url: not a database URL"),
    ("sqlite:////proc/nope/optuna.db", "--study-storage /proc/nope/optuna.db: /proc is not a "
                                       "writable folder"),
    ("sqlite://", "an in-memory study is lost"),
    ("nosuchdb://h/db", "--study-storage nosuchdb://h/db: no driver for nosuchdb"),
])
def test_a_bad_study_storage_is_refused_before_anything(url, message, space, tmp_path, capsys,
                                                        monkeypatch):
    from orchestrator import search

    argv = ["--space", "kdmcse_search", "--profile", str(space / "tiny.yaml"), "--num-samples",
            "2", "--storage", str(tmp_path / "runs"), "--tracking-uri",
            f"sqlite:///{tmp_path / 'mlflow.db'}", "--study-storage", url, "--dry-run"]
    refused(tmp_path, search.main, argv, message, capsys, monkeypatch)


# --- issue 31: a plug-in whose head does not fit its loss ---------------------------------------
MISFIT_GRID = '''
import tests.trainables.misfit_method  # noqa: F401  (registers "misfit")

from orchestrator.spec.grids import Cell, Grid

GRID = Grid(name="misfit", title="a plug-in whose head does not fit its loss",
            cells=(Cell("MCSE", {"objective.method": "mcse"}),
                   Cell("Misfit", {"objective.method": "misfit"})),
            baseline="MCSE", seeds=(0, 1))
'''


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_a_plugin_whose_head_does_not_fit_its_loss_is_refused_before_anything_trains(
        dry, space, tmp_path, capsys, monkeypatch):
    grid = space / "misfit_grid.py"
    grid.write_text(MISFIT_GRID)
    argv = ["--grid", str(grid), "--profile", str(space / "tiny.yaml"), "--storage",
            str(tmp_path / "runs"), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
            *(["--dry-run"] if dry else [])]
    line = refused(tmp_path, ablate.main, argv, "method 'misfit' fails one text batch", capsys,
                   monkeypatch)
    assert "cell(s) ['Misfit']" in line and "aux (linear z 32->7)" in line, line
    assert "hidden 32" in line and "size of tensor a (7)" in line and "fix the method" in line
    assert "--resume" not in line


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_a_refusal_after_the_demo_world_was_built_leaves_no_cache(dry, space, tmp_path, capsys,
                                                                  monkeypatch):
    """The demo world (``.cache/mmemb`` in the work folder by default) is built by the preflight
    before the method check refuses; the refused command removes it again, but never a world
    that was there before the command."""
    profile = yaml.safe_load((space / "tiny.yaml").read_text())
    del profile["data"]["cache_dir"]  # the default: .cache/mmemb under the work folder
    (space / "default_cache.yaml").write_text(yaml.safe_dump(profile))
    (space / "misfit_grid.py").write_text(MISFIT_GRID)
    work = tmp_path / "work"
    work.mkdir()

    def argv(grid: str, dry: bool = dry) -> list[str]:
        return ["--grid", grid, "--profile", str(space / "default_cache.yaml"), "--storage",
                str(work / "runs"), "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}",
                *(["--dry-run"] if dry else [])]

    refused(work, ablate.main, argv(str(space / "misfit_grid.py")),
            "method 'misfit' fails one text batch", capsys, monkeypatch)
    assert not (work / ".cache").exists()
    # a world that was there before the command stays, and is reused as it is
    rc, _, err = run_in(work, ablate.main, argv("table3", dry=True), capsys, monkeypatch)
    assert rc == 0, err[-2000:]
    (world,) = (work / ".cache" / "mmemb" / "demo").glob("demo-v*[!k]")  # not its .lock
    made = {p: p.stat().st_mtime_ns for p in world.rglob("*")}
    refused(work, ablate.main, argv(str(space / "misfit_grid.py")),
            "method 'misfit' fails one text batch", capsys, monkeypatch)
    assert {p: p.stat().st_mtime_ns for p in world.rglob("*")} == made


# --- issue 31: stores that are not what they seem ------------------------------------------------
def _sqlite_header(pages: int) -> bytes:
    """The 100-byte header of a SQLite file of ``pages`` 4096-byte pages (change counters equal)."""
    head = bytearray(100)
    head[:16] = b"SQLite format 3\x00"
    head[16:18] = (4096).to_bytes(2, "big")
    head[24:28] = head[92:96] = (7).to_bytes(4, "big")
    head[28:32] = pages.to_bytes(4, "big")
    return bytes(head)


@pytest.mark.parametrize(("content", "message"), [
    (b"this is my lab notebook, not a database\n", "is not a SQLite database"),
    (_sqlite_header(10) + b"\0" * 4000, "is cut short (4100 of 40960 bytes)"),
], ids=["not-sqlite", "truncated"])
def test_a_store_file_that_is_not_a_whole_sqlite_database_is_refused(content, message, space,
                                                                     tmp_path, capsys,
                                                                     monkeypatch):
    (tmp_path / "mlflow.db").write_bytes(content)
    line = refused(tmp_path, ablate.main, table(space, tmp_path, "--dry-run"), message, capsys,
                   monkeypatch)
    assert f"mv {tmp_path / 'mlflow.db'} {tmp_path / 'mlflow.db'}.bad" in line
    refused(tmp_path, report.main, ["--run", "0" * 32], message, capsys, monkeypatch)
    assert (tmp_path / "mlflow.db").read_bytes() == content


def test_a_database_store_without_its_driver_is_refused(space, tmp_path, capsys, monkeypatch):
    pytest.importorskip("sqlalchemy")
    try:
        import psycopg  # noqa: F401
        pytest.skip("a PostgreSQL driver is installed")
    except ImportError:
        pass
    argv = table(space, tmp_path, "--dry-run")
    argv[argv.index("--tracking-uri") + 1] = "postgresql://me:secret@db.lab:5432/mlflow"
    line = refused(tmp_path, ablate.main, argv, "the Python driver for this database is not "
                   "installed", capsys, monkeypatch)
    assert "pip install" in line and "secret" not in line


class _NotMlflow(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_server_that_is_not_mlflow_is_named_as_such(space, tmp_path, capsys, monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotMlflow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        argv = table(space, tmp_path, "--dry-run")
        argv[argv.index("--tracking-uri") + 1] = f"http://127.0.0.1:{server.server_address[1]}"
        line = refused(tmp_path, ablate.main, argv, "answers but is not an MLflow tracking server "
                       "(HTTP 404 on /health)", capsys, monkeypatch)
        assert "unreachable" not in line
    finally:
        server.shutdown()


# --- issue 31: report on a table that still trains, or was left RUNNING ---------------------------
def _running_table(d: Path, plan: str) -> tuple[str, str]:
    from orchestrator.results.table_report import grid_spec
    from orchestrator.spec.registry import load_grid
    from orchestrator.tracking.client import Tracker

    tr = Tracker(f"sqlite:///{d / 'mlflow.db'}")
    parent = tr.start_parent("table3 (demo)", "table", plan, {"mmemb.grid": "kdmcse_table3"})
    tr.log_artifact_text(parent, "grid.json", json.dumps(grid_spec(load_grid("table3"))))
    child = tr.start_child(parent, {"key": "mcse/seed-0", "cell": "MCSE", "seed": 0,
                                    "grid": "kdmcse_table3", "config_hash": "0" * 12,
                                    "run_name": "MCSE | seed 0", "run": {"seed": 0}})
    return parent, child


def test_report_on_a_table_that_still_trains_writes_nothing(tmp_path, capsys, monkeypatch):
    from orchestrator.run.driver import DriverLock, lock_paths

    store = tmp_path / "store"
    store.mkdir()
    parent, _ = _running_table(store, "plan-live")
    lock = DriverLock(lock_paths("plan-live", store / "mlflow.db", "s3://x"), "the table")
    try:
        work = tmp_path / "work"
        work.mkdir()
        uri = f"sqlite:///{store / 'mlflow.db'}"
        refused(work, report.main, ["--run", parent, "--tracking-uri", uri],
                f"the table of parent {parent} is still training (process", capsys, monkeypatch)
        assert not (store / "reports").exists()
    finally:
        lock.release()


def test_report_on_a_parent_left_running_says_so_and_closes_it_when_asked(tmp_path, capsys,
                                                                          monkeypatch):
    from orchestrator.tracking.client import Tracker

    parent, child = _running_table(tmp_path, "plan-gone")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rc, out, err = run_in(tmp_path, report.main, ["--run", parent, "--tracking-uri", uri], capsys,
                          monkeypatch)
    assert rc == 0, err
    assert f"parent {parent} was left RUNNING by a driver that is gone" in err
    assert f"orchestrator.report --run {parent} --close" in err
    tr = Tracker(uri)
    assert tr.client.get_run(parent).info.status == "RUNNING"
    rc, out, err = run_in(tmp_path, report.main, ["--run", parent, "--tracking-uri", uri, "--close"],
                          capsys, monkeypatch)
    assert rc == 0 and "now KILLED" in out, err
    assert tr.client.get_run(parent).info.status == "KILLED"
    assert tr.client.get_run(child).info.status == "KILLED"


def test_report_out_never_writes_over_a_users_own_files(a_table, tmp_path, capsys, monkeypatch):
    d, parent, _ = a_table
    mine = tmp_path / "paper"
    mine.mkdir()
    (mine / "report.md").write_text("my own notes")
    refused(tmp_path, report.main, ["--run", parent, "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}",
                                    "--out", str(mine)],
            f"--out {mine} already holds report.md, which orchestrator.report did not write",
            capsys, monkeypatch)
    assert (mine / "report.md").read_text() == "my own notes"


# --- issue 31: sync on a journal cut short or of the wrong shape ----------------------------------
def test_sync_uploads_a_journal_whose_last_line_was_cut(a_table, tmp_path, capsys, monkeypatch):
    from orchestrator.tracking.client import Tracker

    d, parent, child = a_table
    journal = tmp_path / "mlflow-journal-plan.jsonl"
    journal.write_text(json.dumps({"op": "parent", "parent": parent}) + "\n"
                       + json.dumps({"op": "set_tag", "handle": child, "key": "mmemb.cut",
                                     "value": "kept"}) + "\n"
                       + '{"op": "set_tag", "handle": "' + child[:7])  # killed mid-line
    uri = f"sqlite:///{d / 'mlflow.db'}"
    rc, out, err = run_in(tmp_path, sync.main, [str(journal), "--tracking-uri", uri], capsys,
                          monkeypatch)
    assert rc == 0, err
    assert f"journal {journal}: its last line (3) was cut short" in err and "2 entries" in err
    assert Tracker(uri).client.get_run(child).data.tags["mmemb.cut"] == "kept"


@pytest.mark.parametrize(("text", "message"), [
    ('[1, 2, 3]\n{"op": "end"}\n', "line 1 is not a journal entry"),
    ('{"op": "set_tag", "handle": "x"}\n', "line 1 is not a journal entry"),
    ('{"op": "parent", "parent": "p"}\nnot json\n{"op": "parent", "parent": "p"}\n',
     "line 2 is not JSON"),
], ids=["wrong-shape", "missing-fields", "damaged-middle"])
def test_sync_refuses_a_journal_it_cannot_read_naming_the_line(text, message, a_table, tmp_path,
                                                                capsys, monkeypatch):
    d, _, _ = a_table
    journal = tmp_path / "j.jsonl"
    journal.write_text(text)
    line = refused(tmp_path, sync.main, [str(journal), "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}"],
                   f"journal {journal} {message}", capsys, monkeypatch)
    assert "nothing was uploaded" in line


# --- issue 31: messages that named the wrong cause ------------------------------------------------
def test_a_file_where_a_folder_should_be_is_named_as_a_file(space, tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "results"
    blocker.write_text("a file, not a folder")
    argv = table(space, tmp_path, "--dry-run")
    argv[argv.index("--storage") + 1] = str(blocker / "runs")
    line = refused(tmp_path, ablate.main, argv, f"{blocker} is a file, so no folder can be made",
                   capsys, monkeypatch)
    assert "mkdir" not in line
    argv = table(space, tmp_path, "--dry-run")
    argv[argv.index("--tracking-uri") + 1] = f"sqlite:///{blocker / 'mlflow.db'}"
    line = refused(tmp_path, ablate.main, argv, f"{blocker} is a file, so no folder can be made",
                   capsys, monkeypatch)
    assert "mkdir" not in line


def test_a_folder_given_for_a_file_is_named_as_a_folder(space, tmp_path, capsys, monkeypatch):
    refused(tmp_path, ablate.main, table(space, tmp_path, "--dry-run", profile=str(space)),
            f"config file {space} is a folder; pass the YAML file inside it", capsys, monkeypatch)


# --- issue 40: a store another process holds locked is in use, not damaged -------------------------
HOLDER = """
import sqlite3, sys
if sys.argv[2] != "-":  # as an mmemb command running a plan on the store would hold it
    from orchestrator.run.driver import DriverLock, lock_paths
    from pathlib import Path
    lock = DriverLock(lock_paths(sys.argv[2], Path(sys.argv[1]), "s3://x"), "the table")
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


@pytest.fixture(scope="module")
def a_store(tmp_path_factory) -> Path:
    """A store with the mmemb experiment and one table parent, made once (MLflow takes seconds
    to create one); each test copies it."""
    from orchestrator.tracking.client import Tracker

    d = tmp_path_factory.mktemp("a-store")
    tr = Tracker(f"sqlite:///{d / 'mlflow.db'}")
    tr.end(tr.start_parent("table3 (demo)", "table", "plan", {"mmemb.grid": "kdmcse_table3"}))
    return d / "mlflow.db"


@contextlib.contextmanager
def holding(db: Path, plan: str = "-"):
    """A second process holding ``BEGIN EXCLUSIVE`` on ``db`` (and, with ``plan``, the driver
    lock of that plan beside it) until the block ends; yields the process. It says when it holds
    the lock: the test waits for that line, not for time."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), plan], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    try:
        assert proc.stdout.readline().strip() == "held", "the holder could not lock the store"
        yield proc
    finally:
        proc.stdin.close()
        proc.wait()


@pytest.mark.parametrize("command", ["dry-run", "run", "report", "ui_links"])
def test_a_store_held_locked_by_another_process_is_in_use_not_damaged(command, a_store, space,
                                                                       tmp_path, capsys,
                                                                       monkeypatch):
    """Round 4: a healthy store held by another writer was called damaged after ~35 s, with
    advice to move it aside, which splits a lab's results into two stores."""
    db = tmp_path / "mlflow.db"
    shutil.copy(a_store, db)
    monkeypatch.setenv("MMEMB_STORE_BUSY_S", "0.5")  # the bounded wait, short for the test
    main, argv = {
        "dry-run": (ablate.main, table(space, tmp_path, "--dry-run")),
        "run": (ablate.main, table(space, tmp_path)),
        "report": (report.main, ["--run", "0" * 32, "--tracking-uri", f"sqlite:///{db}"]),
        "ui_links": (ui_links.main, ["--run", "0" * 32, "--tracking-uri", f"sqlite:///{db}"]),
    }[command]
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with holding(db) as holder:
        line = refused(tmp_path, main, argv, f"{db} is in use: process {holder.pid} (python -c",
                       capsys, monkeypatch)
    assert "did not let go within 0.5 s ($MMEMB_STORE_BUSY_S sets the wait)" in line
    assert "a locked store is not damaged, so keep the file where it is" in line
    assert f"wait for it to finish and run this again (or, if it is stuck, stop it: kill " \
           f"{holder.pid})" in line
    assert "damaged SQLite" not in line and "mv " not in line and "restore" not in line
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_a_store_held_by_a_running_mmemb_command_names_that_command(a_store, tmp_path, capsys,
                                                                    monkeypatch):
    """A colleague's table on the same store: its driver lock says who it is (host, start,
    command line)."""
    db = tmp_path / "mlflow.db"
    shutil.copy(a_store, db)
    monkeypatch.setenv("MMEMB_STORE_BUSY_S", "0.5")
    with holding(db, plan="plan-of-a-colleague") as holder:
        line = refused(tmp_path, report.main, ["--run", "0" * 32, "--tracking-uri",
                                               f"sqlite:///{db}"],
                       f"process {holder.pid} on host {socket.gethostname()} since", capsys,
                       monkeypatch)
        assert "an mmemb command running plan plan-of-a-colleague on this store" in line
        # an MLflow call that met the lock later (MLflow's own wait ran out) says the same
        from mlflow.exceptions import MlflowException

        from orchestrator import cli

        def locked() -> int:
            raise MlflowException("(sqlite3.OperationalError) database is locked")

        assert cli.guarded(locked) == 2
        err = capsys.readouterr().err
        assert f"{db} is in use: process {holder.pid} on host" in err and "MLflow:" not in err


def test_only_a_store_failing_sqlites_integrity_check_is_called_damaged(space, tmp_path, capsys,
                                                                        monkeypatch):
    import sqlite3

    db = tmp_path / "mlflow.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x TEXT)")
    con.executemany("INSERT INTO t VALUES (?)", [(f"row {i}" * 20,) for i in range(2000)])
    con.commit()
    con.close()
    raw = bytearray(db.read_bytes())
    raw[4096 * 3 : 4096 * 3 + 64] = b"\xff" * 64  # one page of the table overwritten
    db.write_bytes(bytes(raw))
    line = refused(tmp_path, ablate.main, table(space, tmp_path, "--dry-run"),
                   f"{db} is a damaged SQLite database", capsys, monkeypatch)
    assert f"mv {db} {db}.bad" in line and "in use" not in line


def test_a_truncated_default_store_names_the_option_that_points_elsewhere(space, tmp_path,
                                                                          capsys, monkeypatch):
    (tmp_path / "mlflow.db").write_bytes(_sqlite_header(10) + b"\0" * 4000)
    argv = [*table(space, tmp_path)[:-2], "--dry-run"]  # no --tracking-uri: ./mlflow.db
    line = refused(tmp_path, ablate.main, argv, "the default tracking store", capsys, monkeypatch)
    assert "is cut short" in line and line.endswith(
        "or pass --tracking-uri sqlite:///PATH/mlflow.db to use another file"), line


# --- issue 40: a grid or search file is code the user wrote -----------------------------------
EXITING = {
    "sys.exit(0)": ("import sys\n\nsys.exit(0)\n",
                    "line 3: calls sys.exit(0) while it is imported, which would end this command "
                    "as a success, having checked nothing"),
    "sys.exit(1)": ("import sys\n\nsys.exit(1)\n",
                    "line 3: calls sys.exit(1) while it is imported, which would end this command "
                    "with exit status 1 and no word of why"),
    "argparse": ("import argparse\n\np = argparse.ArgumentParser()\np.add_argument('--lr', "
                 "required=True)\nARGS = p.parse_args()\n",
                 "line 5: parses a command line with argparse while it is imported, and argparse "
                 "exited on this command's own arguments (the following arguments are required: "
                 "--lr)"),
}


@pytest.mark.parametrize("case", sorted(EXITING))
def test_a_grid_file_that_exits_at_import_is_refused_naming_it(case, space, tmp_path, capsys,
                                                               monkeypatch):
    """Round 4: sys.exit(0) at import made ablate exit 0 having checked nothing; sys.exit(1) exit
    1 saying nothing; argparse printed its usage naming neither file."""
    text, message = EXITING[case]
    work = tmp_path / "work"
    work.mkdir()
    path = tmp_path / "my_grid.py"
    path.write_text(text)
    argv = ["--grid", str(path), *table(space, work, "--dry-run")[2:]]
    line = refused(work, ablate.main, argv, f"{path}: {message}", capsys, monkeypatch)
    assert line.endswith('a grid file is imported, not run as a script: move that part under '
                         'if __name__ == "__main__": (or out of the file); fix that file'), line
    # the whole of stderr is that line: no argparse usage above it
    monkeypatch.chdir(work)
    assert ablate.main(argv) == 2
    assert capsys.readouterr().err.strip() == line


def test_a_search_space_file_and_a_method_file_that_exit_are_refused_naming_them(
        space, tmp_path, capsys, monkeypatch):
    from orchestrator import search

    path = tmp_path / "my_space.py"
    path.write_text(EXITING["sys.exit(0)"][0])
    refused(tmp_path, search.main, ["--space", str(path), "--profile", str(space / "tiny.yaml"),
                                    "--dry-run"],
            f"{path}: line 3: calls sys.exit(0) while it is imported", capsys, monkeypatch)
    method = tmp_path / "my_method.py"
    method.write_text(EXITING["argparse"][0])
    line = refused(tmp_path, ablate.main, ["--methods", str(method),
                                           *table(space, tmp_path, "--dry-run")],
                   f"{method}: line 5: parses a command line with argparse", capsys, monkeypatch)
    assert "a method file is imported" in line


def test_ctrl_c_during_a_slow_grid_import_names_the_file_and_advises_no_resume(space, tmp_path):
    """Round 4: a KeyboardInterrupt during a slow grid import advised --resume, with nothing to
    resume. A real SIGINT to a real command, sent once the grid file says it is running."""
    mark = tmp_path / "importing"
    grid = tmp_path / "slow_grid.py"
    grid.write_text(f"import pathlib\nimport time\n\npathlib.Path({str(mark)!r}).touch()\n"
                    "while True:\n    time.sleep(0.05)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.ablate", "--grid", str(grid),
                             *table(space, tmp_path, "--dry-run")[2:]], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_at_a_terminal)
    try:
        wait_for(lambda: mark.exists() or proc.poll() is not None, "the grid file's import")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=600)  # a hang guard only
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert err.strip() == (f"interrupted (Ctrl-C) while importing the grid file {grid}, at line 6: "
                           "nothing was started or written, so there is nothing to --resume; run "
                           "the command again"), err[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["importing", "slow_grid.py"]


# --- issue 40: inputs that cannot mean what they say ---------------------------------------------
@pytest.mark.parametrize("where", ["--storage", "--tracking-uri", "--profile"])
def test_a_path_with_an_unexpanded_tilde_is_refused(where, space, tmp_path, capsys, monkeypatch):
    """``--storage '~/runs'`` (as a YAML file or a script passes it) planned a folder named ~."""
    argv = table(space, tmp_path, "--dry-run")
    value = {"--storage": "~/runs", "--tracking-uri": "sqlite:///~/mlflow.db",
             "--profile": "~/tiny.yaml"}[where]
    argv[argv.index(where) + 1] = value
    line = refused(tmp_path, ablate.main, argv, f"{value}: the leading ~ was not expanded",
                   capsys, monkeypatch)
    home = str(Path("~").expanduser())
    assert f"a folder called '~' in {tmp_path}" in line
    assert line.endswith(f"write {value.replace('~', home)} instead"), line


NAMED = {
    "blank": ("'   '", "cell '   ' is blank"),
    "newline-and-nul": ("'A\\nB\\x00'", "cell 'A\\nB\\x00' holds control characters ('\\x00', "
                                         "'\\n')"),
    "trailing-space": ("'A '", "cell 'A ' starts or ends with a space"),
}


@pytest.mark.parametrize("case", sorted(NAMED))
def test_a_cell_name_that_cannot_head_a_column_is_refused(case, space, tmp_path, capsys,
                                                          monkeypatch):
    """A cell named '   ', or holding a newline and a NUL, passed the dry run (its report column
    was blank)."""
    name, message = NAMED[case]
    work = tmp_path / "work"
    work.mkdir()
    path = tmp_path / "my_grid.py"
    path.write_text(GRID_HEAD + "GRID = Grid(name='mine', title='t', baseline='A', cells=(\n"
                    "    Cell('A', {'objective.method': 'mcse'}),\n"
                    f"    Cell({name}, {{'objective.method': 'kdmcse'}})))\n")
    argv = ["--grid", str(path), *table(space, work, "--dry-run")[2:]]
    line = refused(work, ablate.main, argv, message, capsys, monkeypatch)
    assert str(path) in line and "rename it in the grid file" in line


@pytest.mark.parametrize("text", ["", "# my profile, to fill in later\n# lr: 1e-4\n"],
                         ids=["empty", "comments-only"])
def test_an_empty_profile_is_refused_as_empty_suggesting_a_base(text, space, tmp_path, capsys,
                                                                  monkeypatch):
    prof = tmp_path / "mine.yaml"
    prof.write_text(text)
    line = refused(tmp_path, ablate.main, table(space, tmp_path, "--dry-run", profile=str(prof)),
                   f"config file {prof} is {'empty' if not text else 'only comments'}: it sets "
                   "nothing", capsys, monkeypatch)
    assert "start it with base: demo (or base: paper)" in line and "store" not in line


@pytest.mark.parametrize(("text", "message"), [
    ("base: demo\nlr: 1.0e-4\nbatch_size: 8\nlr: 3.0e-5\n", "'lr' is given twice (lines 2 and 4)"),
    ("base: demo\ndata.demo_dim: 32\ndata:\n  demo_dim: 64\n",
     "'data.demo_dim' is given twice (as data.demo_dim and as data: {demo_dim})"),
], ids=["same-key", "dotted-and-nested"])
def test_a_key_given_twice_in_a_profile_is_refused(text, message, space, tmp_path, capsys,
                                                   monkeypatch):
    prof = tmp_path / "mine.yaml"
    prof.write_text(text)
    refused(tmp_path, ablate.main, table(space, tmp_path, "--dry-run", profile=str(prof)),
            f"config file {prof}: {message}", capsys, monkeypatch)


def test_a_bad_profile_found_through_mmemb_profile_says_so(space, tmp_path, capsys, monkeypatch):
    prof = tmp_path / "lab.yaml"
    prof.write_text("base: demo\nlr: .nan\n")
    monkeypatch.setenv("MMEMB_PROFILE", str(prof))
    argv = table(space, tmp_path, "--dry-run")
    del argv[argv.index("--profile"):argv.index("--profile") + 2]
    line = refused(tmp_path, ablate.main, argv, f"config file {prof}: lr=nan must be", capsys,
                   monkeypatch)
    assert line.endswith(f"(the profile comes from $MMEMB_PROFILE={prof}, read when no "
                         "--profile is given)"), line


def test_a_batch_larger_than_the_data_is_refused(space, tmp_path, capsys, monkeypatch):
    """batch_size: 5000 on the 800-pair demo store trained on batches of whatever the data held
    (fewer in-batch negatives than asked)."""
    prof = tmp_path / "big.yaml"
    prof.write_text(f"base: {space / 'tiny.yaml'}\nbatch_size: 5000\n")
    line = refused(tmp_path, ablate.main, table(space, tmp_path, "--dry-run", profile=str(prof)),
                   "batch_size=5000 is larger than the 800 caption-image pairs of the generated "
                   "demo corpus", capsys, monkeypatch)
    assert "set batch_size=800 or less" in line


def test_what_the_run_does_unasked_is_said_in_notes(space, tmp_path, capsys, monkeypatch):
    """use_gpu without a GPU trained on the CPU without a word; max_steps 8 with eval_every 100
    evaluated dev only at the last step, silently."""
    from orchestrator.run.resources import local_resources

    prof = tmp_path / "p.yaml"
    prof.write_text(f"base: {space / 'tiny.yaml'}\nuse_gpu: true\nmax_steps: 8\neval_every: 100\n")
    gpu = local_resources()["GPU"] > 0
    extra = ["--gpus-per-trial", "0"] if gpu else []
    rc, out, err = run_in(tmp_path, ablate.main,
                          table(space, tmp_path, "--dry-run", *extra, profile=str(prof)), capsys,
                          monkeypatch)
    assert rc == 0, err[-2000:]
    cells = "['MCSE', 'KDMCSE', 'without AdapACSE', 'without threshold filtering']"
    assert (f"note: cell(s) {cells}: eval_every=100 but each run is 8 steps, so no STS-B dev "
            "evaluation falls inside the run: the only one is at its last step, which is then its "
            "best checkpoint; set eval_every=4 or lower") in err, err
    why = "--gpus-per-trial 0 gives their workers none" if gpu else "this machine has no GPU"
    assert f"note: cell(s) {cells}: use_gpu=true, but {why}, so they train on the CPU" in err


def test_resume_with_nothing_left_to_train_starts_no_ray(space, tmp_path, capsys, monkeypatch):
    """Ray started (seconds, and ~1 GB) when 0 runs were left to train."""
    import trainables.runtime.ray_env as ray_env

    parent = _store_with_table(space, tmp_path, [0, 1], finished=(0, 1))

    def no_ray(*a, **k):
        raise AssertionError("Ray was started for nothing")

    monkeypatch.setattr(ray_env, "init_ray", no_ray)
    rc, out, err = run_in(tmp_path, ablate.main, table(space, tmp_path, "--seeds", "0", "1",
                                                       "--resume"), capsys, monkeypatch)
    assert "8 already done, 0 to run" in out and f"MLflow parent run {parent}" in out, err
    assert "starting Ray" not in out and "Traceback" not in err, err[-2000:]
    assert rc in (0, 1), err[-2000:]  # the report of runs that logged no scores is incomplete


def test_finalists_fewer_than_planned_say_why():
    """The search's dry run promised 3 finalists where the run took 2, silently."""
    import optuna
    from optuna.trial import TrialState

    from orchestrator.run.rounds import pick_finalists

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for value, state in [(70.0, TrialState.COMPLETE), (71.0, TrialState.COMPLETE),
                         (None, TrialState.PRUNED), (None, TrialState.PRUNED),
                         (None, TrialState.FAIL)]:
        t = study.ask()
        study.tell(t, value, state=state) if value is not None else study.tell(t, state=state)
    finalists, note = pick_finalists(study, 3)
    assert [t.value for t in finalists] == [71.0, 70.0]
    assert note == ("2 finalists, not the 3 planned: only 2 configurations completed their round "
                    "(2 pruned by successive halving and 1 failed); a pruned or failed "
                    "configuration has no full-length score, so it is not eligible "
                    "(--no-halving trains every configuration to the end)")
    assert pick_finalists(study, 2)[1] == ""


def test_the_search_dry_run_says_finalists_may_be_fewer(space, tmp_path, capsys, monkeypatch):
    from orchestrator import search

    argv = ["--space", "kdmcse_search", "--profile", str(space / "tiny.yaml"), "--num-samples",
            "4", "--finalists", "3", "--storage", str(tmp_path / "runs"), "--tracking-uri",
            f"sqlite:///{tmp_path / 'mlflow.db'}", "--dry-run"]
    rc, out, err = run_in(tmp_path, search.main, argv, capsys, monkeypatch)
    assert rc == 0, err[-2000:]
    assert "then 3 finalists x" in out
    assert ("(finalists: the best 3 configurations that complete their round; one pruned by "
            "successive halving is not eligible, so there may be fewer)") in out


# --- issue 40: the report, its interrupt, its stale error ------------------------------------------
def test_ctrl_c_while_the_report_is_written_is_held_then_exits_130(capsys):
    """Tune's SIGINT handler outlives fit(): a Ctrl-C while the report was written set an event
    nobody read, and the command ended 0. Now the report is finished, then the command says so
    and exits 130; a second Ctrl-C stops at once."""
    from orchestrator.run.campaign import Session

    swallowed = []
    before = signal.signal(signal.SIGINT, lambda *a: swallowed.append(a))  # as Tune leaves it
    try:
        steps = []

        def finish(spec, extra_md="", lead_md=""):
            steps.append("tables")
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C half-way through the report
            wait_for(lambda: capsys.readouterr().err or None, "the note on Ctrl-C", poll_s=0.01)
            steps.append("report stored")
            return 0

        s = object.__new__(Session)
        s._finish = finish
        assert s.finish({}) == 130
        assert steps == ["tables", "report stored"] and not swallowed
        err = capsys.readouterr().err
        assert ("note: interrupted (Ctrl-C) while the report was written: it was finished first; "
                "every run had ended, so there is nothing to --resume (exit 130)") in err

        def twice(spec, extra_md="", lead_md=""):
            os.kill(os.getpid(), signal.SIGINT)
            wait_for(lambda: capsys.readouterr().err or None, "the note on Ctrl-C", poll_s=0.01)
            os.kill(os.getpid(), signal.SIGINT)
            wait_for(lambda: False, "the second Ctrl-C", poll_s=0.01)

        s._finish = twice
        with pytest.raises(KeyboardInterrupt):
            s.finish({})
        assert signal.getsignal(signal.SIGINT).__name__ == "<lambda>"  # put back as it was
    finally:
        signal.signal(signal.SIGINT, before)


def test_report_clears_a_stale_report_error_and_prints_no_progress_bar(tmp_path, capsys,
                                                                      monkeypatch):
    """After a read-only artifact folder was fixed, report brought every run to FINISHED but
    the parent kept its mmemb.report_error tag; MLflow's "Downloading artifacts" bars printed
    above the command's own lines."""
    from orchestrator.results.table_report import grid_spec
    from orchestrator.spec.registry import load_grid
    from orchestrator.tracking.client import Tracker

    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tr = Tracker(uri)
    parent = tr.start_parent("table3 (demo)", "table", "plan", {"mmemb.grid": "kdmcse_table3"})
    tr.log_artifact_text(parent, "grid.json", json.dumps(grid_spec(load_grid("table3"))))
    tr.client.set_tag(parent, "mmemb.report_error", "PermissionError: [Errno 13] read-only")
    tr.end(parent, "FAILED")
    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    rc, out, err = run_in(tmp_path, report.main, ["--run", parent, "--tracking-uri", uri], capsys,
                          monkeypatch)
    assert rc == 0, err[-2000:]
    assert "mmemb.report_error" not in tr.client.get_run(parent).data.tags
    assert "Downloading artifacts" not in err + out and "%|" not in err, err[-2000:]


def test_no_progress_bar_precedes_the_error_line(a_table, tmp_path, capsys, monkeypatch):
    d, parent, _ = a_table  # a parent without grid.json: read back (a download), then refused
    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    line = refused(tmp_path, report.main, ["--run", parent, "--tracking-uri",
                                           f"sqlite:///{d / 'mlflow.db'}"],
                   "is not a table parent run (no grid.json artifact)", capsys, monkeypatch)
    monkeypatch.chdir(tmp_path)
    report.main(["--run", parent, "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}"])
    assert capsys.readouterr().err.strip() == line
