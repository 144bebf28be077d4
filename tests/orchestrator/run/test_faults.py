"""Issue 19's faults on a running table: SIGTERM, a full disk, a hostile grid name. After each,
no run is left RUNNING, nothing is duplicated, and nothing is written outside the table's folders.

Tables run as ``python -m orchestrator.ablate`` subprocesses on ``grid_tiny.py`` (2 cells x 2
seeds, tiny BERT), as in ``test_resilience.py``, whose helpers these tests share. The full disk is
real: a tmpfs of a few MB mounted (as root) under the test's folder holds the store and the
checkpoints, and fills up mid-table. All three are slow (a table each, minutes on 2 cores).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.orchestrator.run.test_resilience import (
    KEYS,
    ROOT,
    Table,
    by_key,
    dev_points,
    finished_children,
    read_table,
)
from tests.waiting import wait_for
from trainables.testing import write_tiny_profile


def statuses(uri: str) -> dict[str, str]:
    """run name -> status of every run in the store (parents and children)."""
    from orchestrator.tracking.client import Tracker

    tr = Tracker(uri, create=False)
    return {r.info.run_name: r.info.status
            for r in tr.client.search_runs([tr.experiment_id], max_results=1000)}


# --- SIGTERM, as a scheduler's timeout sends it -----------------------------------------------
@pytest.mark.slow
def test_sigterm_ends_the_table_like_ctrl_c(tmp_path, tiny_bert):
    """The driver gets SIGTERM mid-training: Tune stops, every unfinished run ends KILLED with
    the reason (none RUNNING), exit 130; --resume then finishes exactly the missing runs."""
    write_tiny_profile(tmp_path, tiny_bert, max_steps=200, eval_every=20)
    store = tmp_path / "store"
    db = store / "mlflow.db"
    t = Table(tmp_path, store, "run")
    wait_for(lambda: dev_points(db) > 0 or t.proc.poll() is not None, "a first dev evaluation",
             limit_s=1800, poll_s=0.3)
    assert t.proc.poll() is None, t.out[-2000:] + t.err[-3000:]
    os.kill(t.proc.pid, signal.SIGTERM)
    rc = t.wait()
    assert rc == 130, t.err[-3000:]
    assert "interrupted" in t.err and "Traceback" not in t.err, t.err[-3000:]
    tr, parent, kids = read_table(t.tracking)
    assert tr.client.get_run(parent).info.status == "KILLED"
    assert "interrupted" in tr.client.get_run(parent).data.tags["mmemb.error"]
    unfinished = [c for c in kids if c.info.status != "FINISHED"]
    assert unfinished, "SIGTERM came after every run had finished"
    for c in unfinished:
        assert c.info.status == "KILLED", (c.data.tags["mmemb.trial"], c.info.status)
        assert "interrupted" in c.data.tags["mmemb.error"]
    assert "RUNNING" not in statuses(t.tracking).values()

    r = Table(tmp_path, store, "resume", "--resume")
    assert r.wait() == 0, r.err[-3000:]
    _, parent2, kids = read_table(t.tracking)
    assert parent2 == parent and all(c.info.status == "FINISHED" for c in by_key(kids).values())


# --- a hostile grid name ------------------------------------------------------------------------
@pytest.mark.slow
def test_a_hostile_grid_name_writes_nothing_outside_the_tables_folders(tmp_path, tiny_bert):
    """A grid named ``../../evil`` with a cell named ``../../x``: Ray's experiment and trial
    folders, the Train runs and the report are named by safe slugs inside --storage and
    beside the store; the table finishes."""
    write_tiny_profile(tmp_path, tiny_bert)
    grid = tmp_path / "evil_grid.py"
    grid.write_text(
        "from orchestrator.spec.grids import Cell, Grid\n"
        "GRID = Grid(name='../../evil', title='hostile', baseline='MCSE', seeds=(0, 1), cells=(\n"
        "    Cell('MCSE', {'objective.method': 'mcse'}),\n"
        "    Cell('../../x', {'objective.method': 'kdmcse'})))\n")
    work = tmp_path / "a" / "b" / "work"
    work.mkdir(parents=True)
    before = {p for p in tmp_path.rglob("*")}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.ablate", "--grid", str(grid), "--profile",
         str(tmp_path / "tiny.yaml"), "--storage", "runs", "--tracking-uri",
         f"sqlite:///{work / 'mlflow.db'}", "--array-size", "2"],
        cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    outside = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
                     if p not in before and work not in p.parents and p != work
                     and not p.is_relative_to(tmp_path / "cache"))
    assert outside == [], outside
    assert not (tmp_path / "evil").exists() and not (tmp_path / "a" / "evil").exists()
    names = [p.name for p in (work / "runs").iterdir()]
    assert any(n.startswith("evil-") for n in names), names
    assert list((work / "reports").glob("evil-*/report.md"))
    assert "RUNNING" not in statuses(f"sqlite:///{work / 'mlflow.db'}").values()


# --- the disk fills up mid-table ----------------------------------------------------------------
@contextlib.contextmanager
def small_disk(path: Path, size: str):
    """A real tmpfs of ``size`` mounted at ``path`` (root only), unmounted afterwards."""
    path.mkdir(parents=True)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot mount a small tmpfs here ({e}); the full-disk test needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(folder: Path) -> Path:
    """Write one file until the disk is full; -> the file (delete it to free the space)."""
    filler = folder / "filler.bin"
    chunk = b"\0" * 2**16
    with filler.open("wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass
    return filler


@pytest.mark.slow
def test_a_full_disk_mid_table_loses_nothing_and_says_which_folder(tmp_path, tiny_bert):
    """The disk holding the store and the checkpoints fills after the first dev evaluation.
    The table ends with one line naming that folder and the fix; the journal moves to a
    writable folder; after freeing space, the printed sync leaves no run RUNNING (the
    unfinished ones FAILED with the reason) and --resume finishes exactly the missing runs."""
    write_tiny_profile(tmp_path, tiny_bert, max_steps=60, eval_every=10)
    fallback = tmp_path / "journals"
    with small_disk(tmp_path / "disk", "24m") as disk:
        store = disk / "table"
        db = store / "mlflow.db"
        t = Table(tmp_path, store, "run", env={"MMEMB_JOURNAL_DIR": str(fallback)})
        wait_for(lambda: dev_points(db) > 0 or t.proc.poll() is not None,
                 "a first dev evaluation", limit_s=1800, poll_s=0.2)
        assert t.proc.poll() is None, t.out[-2000:] + t.err[-3000:]
        finished_before = sorted(finished_children(db))
        filler = fill(disk)
        rc = t.wait()
        err = t.err
        errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
        assert rc != 0 and len(errors) == 1, err[-4000:]
        assert f"the disk holding {store}" in errors[0] or f"the disk holding {disk}" in \
            errors[0], errors[0]
        assert "Free space there" in errors[0] and "--resume" in errors[0], errors[0]
        upload = re.search(r"(python -m orchestrator\.sync \S+ --tracking-uri [^\s;]+)", errors[0])
        assert upload, errors[0]
        journal = Path(shlex.split(upload.group(1))[3])
        assert journal.parent == fallback and journal.is_file(), (journal, err[-2000:])
        assert f"it is now {journal}" in err  # said when it moved

        filler.unlink()  # space again
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        sync = subprocess.run([sys.executable, *shlex.split(upload.group(1))[1:]], cwd=store,
                              env=env, capture_output=True, text=True, timeout=600)
        assert sync.returncode == 0, sync.stderr[-3000:]
        assert "RUNNING" not in statuses(t.tracking).values()
        tr, parent, kids = read_table(t.tracking)
        assert tr.client.get_run(parent).info.status == "FAILED"
        for c in kids:
            if c.info.status != "FINISHED":
                assert c.info.status == "FAILED" and c.data.tags.get("mmemb.error"), \
                    c.data.tags
        assert set(finished_before) <= {c.data.tags["mmemb.trial"] for c in kids
                                        if c.info.status == "FINISHED"}

        r = Table(tmp_path, store, "resume", "--resume")
        assert r.wait() == 0, r.err[-3000:]
        _, parent2, kids = read_table(t.tracking)
        assert parent2 == parent
        kids = by_key(kids)  # each run exactly once
        assert sorted(kids) == sorted(KEYS)
        assert all(c.info.status == "FINISHED" for c in kids.values())
        assert "RUNNING" not in statuses(t.tracking).values()
