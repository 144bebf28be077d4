"""Issue 49: a sqlite store held locked by another process mid-table (a colleague's long
transaction). The table keeps its results in the journal, asks the store again with back-off,
uploads them itself once the lock goes, and ends FINISHED with nothing left to do by hand; a
later ``orchestrator.sync`` of its journal changes nothing. Slow: a whole tiny table."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.orchestrator.run.test_resilience import (  # noqa: F401 - fixtures used by name
    ROOT,
    assert_dev_curve_once_per_eval,
    by_key,
    log,
    read_table,
    space,
    tables,
    wait_for_finished,
)

HOLD_S = 45
"""longer than MLflow's own wait for a lock (20 s), so a write of the table meets it and fails"""

HOLDER = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
con.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def rows(db) -> dict[str, int]:
    con = sqlite3.connect(db)
    try:
        return {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("metrics", "runs", "tags")}
    finally:
        con.close()


@pytest.mark.slow
def test_a_store_locked_mid_table_is_caught_up_by_the_table_itself(space, tables):  # noqa: F811
    store = space / "locked"
    db = store / "mlflow.db"
    t = tables(space, store, "run", env={"MMEMB_JOURNAL_RETRY_S": "2"})
    wait_for_finished(db, 1, t)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), str(HOLD_S)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    locked_at = time.time() - t.t0
    holder.wait()
    rc = t.wait()
    err = t.err
    assert rc == 0, err[-3000:]
    assert f"was locked by process {holder.pid}" in err, "no write met the lock: " + err[-2000:]
    assert "ERROR mlflow" not in err and "Traceback" not in err and "run this again" not in err
    tr, parent, kids = read_table(t.tracking)
    kids = by_key(kids)
    assert all(c.info.status == "FINISHED" for c in kids.values())
    assert tr.client.get_run(parent).info.status == "FINISHED"
    assert_dev_curve_once_per_eval(tr, kids)
    (journal,) = store.glob("runs/mlflow-journal-*.uploaded")  # all of it went, by itself
    assert not list(store.glob("runs/mlflow-journal-*.jsonl"))
    before = rows(db)
    done = subprocess.run([sys.executable, "-m", "orchestrator.sync", str(journal),
                           "--tracking-uri", t.tracking], cwd=store, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "nothing to upload" in done.stdout, done.stderr
    assert rows(db) == before
    log("store locked mid-table", locked_after_s=round(locked_at), hold_s=HOLD_S,
        table_s=round(t.seconds), rows=before)
