"""One driver per plan and store (issue 19, row "two orchestrator.ablate commands in one folder at
once"): the lock itself (fast), a table refused while another driver holds its plan (fast, no
Ray), the MLflow schema created once by racing processes (fast), and a real race of two
``orchestrator.ablate`` processes on one folder, then a queued ``--resume`` (slow).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator import ablate
from orchestrator.run.driver import STALE_S, DriverLock, identity, live_driver, lock_paths
from tests.orchestrator.run.test_resilience import GRID, KEYS, Table, kill_tagged, read_table
from tests.waiting import wait_for
from trainables.testing import write_tiny_profile

ROOT = Path(__file__).resolve().parents[3]


def test_a_second_lock_is_refused_naming_the_holder_then_granted(tmp_path):
    paths = lock_paths("plan1", tmp_path / "mlflow.db", str(tmp_path / "runs"))
    assert paths == [tmp_path / ".mlflow.db.drivers" / "plan1.lock",
                     tmp_path / "runs" / ".drivers" / "plan1.lock"]
    first = DriverLock(paths, "the table")
    with pytest.raises(ValueError) as e:
        DriverLock(paths, "the table")
    msg = str(e.value)
    assert msg.startswith("the table is already running: process "
                          f"{os.getpid()} on host {socket.gethostname()} since ")
    assert f"kill {os.getpid()}" in msg and "--queue" in msg and "\n" not in msg
    other = DriverLock(lock_paths("plan2", tmp_path / "mlflow.db", str(tmp_path / "runs")), "x")
    other.release()  # another plan on the same store is another lock
    first.release()
    DriverLock(paths, "the table").release()  # free again once released


def test_queue_waits_for_the_holder(tmp_path):
    paths = lock_paths("plan", tmp_path / "mlflow.db", str(tmp_path / "runs"))
    first = DriverLock(paths, "the table")
    said: list[str] = []
    got: list[DriverLock] = []
    waiter = threading.Thread(target=lambda: got.append(
        DriverLock(paths, "the table", queue=True, say=said.append)))
    waiter.start()
    wait_for(lambda: said, "the queued driver to say it waits")
    assert said[0].startswith(f"waiting for process {os.getpid()} on host ") and not got
    first.release()
    waiter.join(timeout=60)
    assert got and json.loads(paths[0].read_text())["pid"] == os.getpid()
    got[0].release()


def test_a_heartbeat_names_a_live_driver_on_another_host_only_while_fresh():
    now = time.time()
    other = json.dumps({"pid": 7, "host": "elsewhere", "started": now})
    assert live_driver({"mmemb.heartbeat": f"{now - 10:.0f}", "mmemb.driver": other},
                       now)["host"] == "elsewhere"
    assert live_driver({"mmemb.heartbeat": f"{now - STALE_S - 1:.0f}", "mmemb.driver": other},
                       now) is None  # a driver that died: its parent may be resumed
    me = json.dumps(identity())
    assert live_driver({"mmemb.heartbeat": f"{now:.0f}", "mmemb.driver": me}, now) is None
    assert live_driver({}, now) is None  # a parent from before heartbeats


def test_a_table_is_refused_while_another_driver_holds_its_plan(tmp_path, tiny_bert, capsys,
                                                                monkeypatch):
    import ray

    from orchestrator.spec.plan import plan_id, plan_runs
    from orchestrator.spec.registry import load_grid

    write_tiny_profile(tmp_path, tiny_bert)
    profile = str(tmp_path / "tiny.yaml")
    grid = load_grid(GRID)
    pid = plan_id("table", grid.name, plan_runs(grid, profile), "tiny")
    held = DriverLock(lock_paths(pid, tmp_path / "mlflow.db", str(tmp_path / "runs")), "x")
    monkeypatch.chdir(tmp_path)
    try:
        rc = ablate.main(["--grid", GRID, "--profile", profile])
    finally:
        held.release()
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert rc == 2 and len(errors) == 1, err
    assert f"(plan {pid}) on sqlite:///{tmp_path / 'mlflow.db'} is already running: process " \
           f"{os.getpid()}" in errors[0]
    assert not ray.is_initialized()
    con = sqlite3.connect(tmp_path / "mlflow.db")
    assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0  # no parent made
    con.close()


RACER = """
import sys, time
from pathlib import Path
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
from orchestrator.tracking.client import Tracker
t = Tracker(sys.argv[1])
print(t.experiment_id)
"""


def test_the_mlflow_schema_is_created_once_when_commands_race(tmp_path):
    """Three processes open a fresh sqlite store at the same moment: each gets the store and the
    one experiment (without the lock, alembic's migration fails in all but one)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", RACER, uri, str(go)], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    time.sleep(0.5)  # only lets the interpreters reach the wait; the race starts at "go"
    go.touch()
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e[-2000:] for _, e in outs]
    assert len({o.strip() for o, _ in outs}) == 1  # one experiment
    con = sqlite3.connect(tmp_path / "mlflow.db")
    assert con.execute("SELECT COUNT(*) FROM experiments WHERE name = 'mmemb'").fetchone()[0] == 1
    con.close()


@pytest.mark.slow
def test_two_tables_at_once_in_one_folder_then_a_queued_resume(tmp_path, tiny_bert):
    """Two ``orchestrator.ablate`` on one folder at the same moment: one trains, the other is
    refused at once naming it. Then one runs while another, started with ``--resume --queue``,
    waits for it and finds nothing left to train. One parent, each run once, throughout."""
    write_tiny_profile(tmp_path, tiny_bert)
    store = tmp_path / "store"
    a = Table(tmp_path, store, "a")
    b = Table(tmp_path, store, "b")
    rcs = {a.wait(): a, b.wait(): b}
    assert sorted(rcs) == [0, 2], (a.err[-2000:], b.err[-2000:])
    loser, winner = rcs[2], rcs[0]
    errors = [ln for ln in loser.err.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and f"is already running: process {winner.proc.pid} on host " \
        f"{socket.gethostname()}" in errors[0], loser.err[-3000:]
    assert "Traceback" not in loser.err
    assert loser.seconds < winner.seconds / 2  # refused at once, not after training
    tr, parent, kids = read_table(winner.tracking)
    assert sorted(c.data.tags["mmemb.trial"] for c in kids) == sorted(KEYS)
    assert all(c.info.status == "FINISHED" for c in kids)

    # the same plan again, fresh, with a queued --resume behind it
    store2 = tmp_path / "store2"
    first = Table(tmp_path, store2, "first")
    lock = store2 / ".mlflow.db.drivers"
    wait_for(lambda: any(f.read_text() for f in lock.glob("*.lock")) if lock.is_dir() else None,
             "the first table to hold its lock", limit_s=600)
    second = Table(tmp_path, store2, "second", "--resume", "--queue")
    wait_for(lambda: "(--queue)" in second.err or second.proc.poll() is not None,
             "the queued table to say it waits")
    assert f"waiting for process {first.proc.pid} on host" in second.err, second.err
    assert first.wait() == 0, first.err[-3000:]
    assert second.wait() == 0, second.err[-3000:]
    assert "4 already done, 0 to run" in second.out
    _, parent2, kids2 = read_table(first.tracking)
    assert sorted(c.data.tags["mmemb.trial"] for c in kids2) == sorted(KEYS)
    kill_tagged(first.tag)
    kill_tagged(second.tag)


def test_a_fresh_heartbeat_on_the_store_refuses_a_second_driver(tmp_path):
    """A tracking server shared by machines that share no folder: the parent's heartbeat."""
    from orchestrator.run.driver import DRIVER_TAG, HEARTBEAT_TAG, check_store
    from orchestrator.tracking.client import Tracker

    tr = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    elsewhere = json.dumps({"pid": 7, "host": "elsewhere", "started": time.time()})
    tr.start_parent("t", "table", "plan1", {DRIVER_TAG: elsewhere,
                                            HEARTBEAT_TAG: f"{time.time():.0f}"})
    with pytest.raises(ValueError, match="the table is already running: process 7 on host "
                                         "elsewhere .*fresh heartbeat"):
        check_store(tr, "plan1", "the table", queue=False)
    check_store(tr, "plan2", "the table", queue=False)  # another plan: free
    stale = tr.start_parent("t", "table", "plan3", {DRIVER_TAG: elsewhere,
                                                    HEARTBEAT_TAG: f"{time.time() - 2 * STALE_S:.0f}"})
    check_store(tr, "plan3", "the table", queue=False)  # its driver is gone
    assert stale
