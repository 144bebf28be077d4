"""Issue 19, as a hostile new user tries it: every bad input gets one ``error:`` line naming the
file or option, the value and the fix, a non-zero exit, before Ray starts, with nothing written.

One test (or parametrized case) per row of the issue's table that needs no training; the rows
that need a running table (two drivers at once, a full disk, SIGTERM, a hostile name end to end)
are in ``tests/orchestrator/run/test_driver.py`` and ``tests/orchestrator/run/test_faults.py``.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
from pathlib import Path

import pytest
import yaml

from orchestrator import ablate, best, report, sync, ui_links
from tests.orchestrator.refusing import refused, run_in
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
    bad.write_text((space / "tiny.yaml").read_text() + f"{key}: {value}\n")
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
