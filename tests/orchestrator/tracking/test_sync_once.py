"""Issue 49: a journal is uploaded once, however often it is synced, and a journal whose store
comes back mid-table uploads itself."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import sync
from orchestrator.tracking.client import TAG, Tracker
from orchestrator.tracking.journal import PENDING, Journal
from orchestrator.tracking.replay import MARK, marks
from tests.orchestrator.tracking.test_journal import plan


def rows(tracker) -> dict[str, int]:
    """The store's own row counts: what a doubled upload would grow."""
    con = sqlite3.connect(tracker.uri.removeprefix("sqlite:///"))
    try:
        return {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("metrics", "runs", "tags", "params")}
    finally:
        con.close()


def down(*args, **kwargs):
    raise ConnectionError("server gone")


def offline_table(tracker, tmp_path, monkeypatch) -> tuple[str, Journal]:
    """A table that lost its store after its first result: two runs, their histories, their
    ends and the parent's FAILED end (as a table ending offline writes it) wait in a journal."""
    parent = tracker.start_parent("t", "table", "p", {})
    box = Journal(tracker, tmp_path / "runs" / "mlflow-journal-p.jsonl", parent=parent)
    a = box.start_child(parent, plan("A", 0))
    box.log_result(a, {"step": 3, "stsb_dev": 70.0, "loss/total": 1.5})
    for name in ("log_result", "start_child", "end", "reopen_child"):
        monkeypatch.setattr(tracker, name, down)
    box.log_result(a, {"step": 6, "stsb_dev": 71.0, "final": 1, "test/avg": 75.5})
    box.end(a, "FINISHED")
    b = box.start_child(parent, plan("B", 0))
    for step in (3, 6):
        box.log_result(b, {"step": step, "stsb_dev": 60.0 + step, "loss/total": 2.0 / step})
    box.log_result(b, {"step": 6, "final": 1, "test/avg": 74.0})
    box.end(b, "FINISHED")
    box.end(parent, "FAILED")
    monkeypatch.undo()
    assert box.offline and box.path.is_file()
    return parent, box


def test_a_second_sync_of_the_same_journal_uploads_nothing(tracker, tmp_path, monkeypatch,
                                                           capsys):
    parent, box = offline_table(tracker, tmp_path, monkeypatch)
    assert sync.main([str(box.path), "--tracking-uri", tracker.uri]) == 0
    first = capsys.readouterr().out
    assert "uploaded 9 entries" in first
    done = box.path.with_suffix(".uploaded")
    assert done.is_file() and not box.path.exists()
    after_first = rows(tracker)
    tracker.end(parent, "FINISHED")  # what `report` does once every run finished
    assert marks(tracker, parent) == {box.writer: "9"}

    # again, under its new name and under its old one: the store does not change
    for name in (done, box.path):
        assert sync.main([str(name), "--tracking-uri", tracker.uri]) == 0
        out = capsys.readouterr().out
        assert f"nothing to upload: the 9 entries of {done} are in {tracker.uri} already" in out
        assert rows(tracker) == after_first
    kids = tracker.children(parent)
    assert sorted(c.data.tags[f"{TAG}trial"] for c in kids) == ["A/seed-0", "B/seed-0"]
    assert all(c.info.status == "FINISHED" for c in kids)
    assert tracker.client.get_run(parent).info.status == "FINISHED"  # not back to FAILED
    hist = tracker.client.get_metric_history(kids[0].info.run_id, "stsb_dev")
    assert len(hist) == len({m.step for m in hist})  # every point once


def test_a_sync_cut_short_uploads_the_rest_once(tracker, tmp_path, monkeypatch, capsys):
    """The store fails half-way through a sync: the second sync applies only what was left, and
    the store ends as after one whole sync (a copy of the journal synced into a copy of the
    store shows how that is)."""
    parent, box = offline_table(tracker, tmp_path, monkeypatch)
    whole = tmp_path / "whole"
    whole.mkdir()
    (whole / "mlflow.db").write_bytes((tmp_path / "mlflow.db").read_bytes())
    copy = whole / box.path.name
    copy.write_text(box.path.read_text())
    other = Tracker(f"sqlite:///{whole / 'mlflow.db'}")
    assert sync.main([str(copy), "--tracking-uri", other.uri]) == 0

    calls = []

    def end_fails(self, run_id, status="FINISHED"):
        calls.append(run_id)
        raise ConnectionError("server gone again")

    monkeypatch.setattr(Tracker, "end", end_fails)  # the sync's own Tracker
    assert sync.main([str(box.path), "--tracking-uri", tracker.uri]) != 0
    assert calls and box.path.is_file()  # not renamed: not all of it is in the store
    monkeypatch.undo()
    capsys.readouterr()
    assert sync.main([str(box.path), "--tracking-uri", tracker.uri]) == 0
    out = capsys.readouterr().out
    assert "uploaded 7 entries" in out and "(2 were there already)" in out
    assert rows(tracker)["metrics"] == rows(other)["metrics"]
    assert rows(tracker)["runs"] == rows(other)["runs"]


def test_a_journal_uploads_itself_once_the_store_answers_again(tracker, tmp_path, monkeypatch,
                                                                capsys):
    parent = tracker.start_parent("t", "table", "p", {})
    box = Journal(tracker, tmp_path / "j.jsonl", parent=parent, retry=0)
    for name in ("log_result", "start_child", "end", "reopen_child"):
        monkeypatch.setattr(tracker, name, down)
    b = box.start_child(parent, plan("B", 0))
    box.log_result(b, {"step": 3, "stsb_dev": 63.0})
    # the header naming the table went at once (the store answers its tags), the rest waits
    assert b == PENDING + "B/seed-0" and box.offline and len(box.held) == 2
    monkeypatch.undo()  # the store is back: the next write uploads everything, then goes on
    box.log_result(b, {"step": 6, "final": 1, "test/avg": 74.0})
    assert not box.offline and not box.held
    err = capsys.readouterr().err
    assert "did not answer (ConnectionError: server gone)" in err
    assert f"note: MLflow answers again; what was kept in {box.path} meanwhile is uploaded " \
           "(4 entries so far)" in err
    box.end(b, "FINISHED")  # straight to the store, to the run the pending handle became
    (kid,) = tracker.children(parent)
    assert kid.info.status == "FINISHED" and kid.data.metrics["test/avg"] == 74.0
    assert box.finish(0) and box.retired == tmp_path / "j.uploaded"
    before = rows(tracker)
    assert sync.main([str(box.retired), "--tracking-uri", tracker.uri]) == 0
    assert "nothing to upload" in capsys.readouterr().out and rows(tracker) == before


def test_an_old_uploaded_journal_is_not_uploaded_twice(tracker, tmp_path, capsys):
    """A journal of an mmemb from before entries had identities, already uploaded (renamed
    ``.uploaded``) with no mark in the store: refused, not uploaded again."""
    parent = tracker.start_parent("t", "table", "p", {})
    old = tmp_path / "mlflow-journal-p.uploaded"
    old.write_text(json.dumps({"op": "parent", "parent": parent}) + "\n"
                   + json.dumps({"op": "end", "handle": parent, "status": "FAILED"}) + "\n")
    tracker.end(parent, "FINISHED")
    assert sync.main([str(old), "--tracking-uri", tracker.uri]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: journal") and "was uploaded before" in err
    assert "rename it to end in .jsonl" in err and len(err.splitlines()) == 1
    assert tracker.client.get_run(parent).info.status == "FINISHED"
    assert not any(k.startswith(MARK) for k in tracker.client.get_run(parent).data.tags)


HOLDER = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


@contextlib.contextmanager
def holding(db: Path):
    """Another process holding ``BEGIN EXCLUSIVE`` on the store until the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.stdin.close()
        proc.wait()


@pytest.mark.slow
def test_a_store_locked_mid_table_gets_everything_once_the_lock_goes(tracker, tmp_path, capfd):
    """The issue's case: another process holds the sqlite store locked mid-table. The write
    fails after MLflow's own wait, in one line naming the holder (no MLflow ERROR block, no
    "run this again"); once the lock goes, the journal uploads what it kept by itself and the
    table's end finds nothing left to do."""
    parent = tracker.start_parent("t", "table", "p", {})
    box = Journal(tracker, tmp_path / "j.jsonl", parent=parent, retry=0)
    a = box.start_child(parent, plan("A", 0))
    box.log_result(a, {"step": 3, "stsb_dev": 70.0})
    capfd.readouterr()
    t0 = time.monotonic()
    with holding(tmp_path / "mlflow.db") as holder:
        box.log_result(a, {"step": 6, "stsb_dev": 71.0, "final": 1, "test/avg": 75.5})
        assert box.offline, f"the write went through a held lock ({time.monotonic() - t0:.0f} s)"
        box.retry_at = float("inf")  # ask again only once the lock is gone
    box.retry_at = 0.0
    box.end(a, "FINISHED")
    assert not box.offline and not box.held and box.finish(0)
    err = capfd.readouterr().err
    assert f"was locked by process {holder.pid} (python -c" in err
    assert "ERROR mlflow" not in err and "Traceback" not in err and "run this again" not in err
    assert "note: MLflow answers again" in err
    run = tracker.client.get_run(a)
    assert run.info.status == "FINISHED" and run.data.metrics["test/avg"] == 75.5
    hist = tracker.client.get_metric_history(a, "stsb_dev")
    assert sorted((m.step, m.value) for m in hist) == [(3, 70.0), (6, 71.0)]
    before = rows(tracker)
    assert sync.main([str(box.retired), "--tracking-uri", tracker.uri]) == 0
    assert rows(tracker) == before


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_retry_wait_is_refused_before_anything_starts(value, tmp_path, capsys,
                                                            monkeypatch):
    from orchestrator import ablate
    from tests.orchestrator.refusing import refused

    monkeypatch.setenv("MMEMB_JOURNAL_RETRY_S", value)
    refused(tmp_path, ablate.main, ["--grid", "kdmcse_table3", "--dry-run"],
            f"$MMEMB_JOURNAL_RETRY_S={value!r} must be a number of seconds >= 0", capsys,
            monkeypatch)
