"""One driver per plan and store: a second command on the same campaign refuses at once.

Two drivers of one plan would both train it: two parent runs (or, with ``--resume``, one parent
with two children per run) and two Train runs writing the same checkpoint folders. Each driver
therefore holds an exclusive lock per place it writes, named by the plan id:

- beside a sqlite store: ``.<db name>.drivers/<plan id>.lock``;
- in a local ``--storage`` folder: ``.drivers/<plan id>.lock`` (on a cluster this folder is shared
  by the nodes, so drivers on two machines meet there too).

The lock is an ``flock`` held for the driver's life: the kernel drops it when the process ends,
however it ends, so a crash never leaves a stale lock. The file holds who holds it (process,
host, start, command), which the refusal names. ``--queue`` waits for the holder instead.

A tracking server shared by machines that share no folder is covered by the parent run itself:
while a driver runs on a non-sqlite store, it refreshes ``mmemb.heartbeat`` on its parent, and a
second driver of the plan that finds a fresh heartbeat refuses (or waits) the same way. A
heartbeat whose driver ran on this very host is trusted only while that process lives (its PID
with the same start time): a driver killed with its machine's Ray (`ray up` restarting the head)
is resumed at once. One on another host is trusted until it is ``STALE_S`` old, and the refusal
says how long that is.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

HEARTBEAT_TAG, DRIVER_TAG = "mmemb.heartbeat", "mmemb.driver"
HEARTBEAT_S = 60.0
"""how often a driver on a tracking server refreshes its parent's heartbeat"""
STALE_S = 5 * HEARTBEAT_S
"""a heartbeat older than this belongs to a driver that is gone"""


def identity() -> dict[str, Any]:
    """Who this driver is: process (with its start time in the kernel's clock ticks, which a
    later process given the same PID does not share), host, start time and command line."""
    from orchestrator.tracking.uris import masked_args

    # Stored in MLflow and shown to colleagues: a password in a URI argument stays out.
    return {"pid": os.getpid(), "pid_start": process_start(os.getpid()),
            "host": socket.gethostname(), "started": time.time(),
            "command": " ".join(["python", *masked_args(sys.argv)])[:500]}


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot; None where it is gone (or
    the system has no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def alive_here(holder: dict[str, Any]) -> bool | None:
    """Whether a driver that ran on this host still runs: its PID lives, with the start time it
    recorded. None where that cannot be told (another host, no PID, no /proc)."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return None
    if not Path("/proc/self/stat").exists():
        return None
    start = process_start(holder["pid"])
    if start is None:
        return False
    recorded = holder.get("pid_start")
    return recorded is None or recorded == start  # an older driver recorded no start time


def describe(holder: dict[str, Any]) -> str:
    started = holder.get("started")
    since = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(started)) if started else ""
    cmd = f" ({holder['command']})" if holder.get("command") else ""
    return f"process {holder.get('pid', '?')} on host {holder.get('host', '?')}{since}{cmd}"


def lock_paths(plan_id: str, db: Path | None, storage: str) -> list[Path]:
    """The lock files of a plan: beside a sqlite store and in a local --storage folder."""
    out = []
    if db is not None:
        out.append(db.absolute().parent / f".{db.name}.drivers" / f"{plan_id}.lock")
    if "://" not in storage:
        out.append(Path(storage).absolute() / ".drivers" / f"{plan_id}.lock")
    return out


class DriverLock:
    """The locks of one driver; :meth:`release` (or process exit) frees them."""

    def __init__(self, paths: Sequence[Path], what: str, queue: bool = False,
                 say: Callable[[str], None] | None = None):
        self.files: list[IO[str]] = []
        me = identity()
        try:
            for path in paths:
                path.parent.mkdir(parents=True, exist_ok=True)
                fh = path.open("a+")
                self.files.append(fh)
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _read(path)
                    if not queue:
                        raise ValueError(
                            f"{what} is already running: {describe(holder)}; wait for it to end "
                            f"(or stop it: kill {holder.get('pid', 'PID')}), or add --queue to "
                            "wait for it here") from None
                    (say or _say)(f"waiting for {describe(holder)} to end (--queue)")
                    fcntl.flock(fh, fcntl.LOCK_EX)
                fh.seek(0)
                fh.truncate()
                fh.write(json.dumps(me))
                fh.flush()
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for fh in self.files:
            with contextlib.suppress(OSError, ValueError):
                fh.close()  # closing drops the flock; the file stays (another may hold it now)
        self.files = []


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --- a tracking server shared by machines that share no folder --------------------------------
def live_driver(tags: dict[str, str], now: float | None = None) -> dict[str, Any] | None:
    """The driver a parent run's tags name, when its heartbeat is fresh and it is not this one."""
    now = time.time() if now is None else now
    try:
        beat = float(tags.get(HEARTBEAT_TAG, "0") or 0)
    except ValueError:
        return None
    if now - beat > STALE_S:
        return None
    try:
        holder = json.loads(tags.get(DRIVER_TAG, "{}") or "{}")
    except ValueError:
        holder = {}
    if not isinstance(holder, dict):
        holder = {}
    me = identity()
    if holder.get("pid") == me["pid"] and holder.get("host") == me["host"]:
        return None
    if alive_here(holder) is False:  # it ran on this host and is gone: stale now
        return None
    return {**holder, "beat": beat}


def stale_in(holder: dict[str, Any], now: float | None = None) -> str:
    """How long until a driver on another host that stopped beating counts as gone."""
    now = time.time() if now is None else now
    beat = holder.get("beat")
    if not isinstance(beat, (int, float)):
        return ""
    left = max(0, round(beat + STALE_S - now))
    at = time.strftime("%H:%M:%S", time.localtime(now + left))
    return (f"; its last heartbeat is {round(now - beat)} s old: if that driver is gone (its "
            f"machine crashed), run this again in {left} s (at {at}), when the heartbeat is "
            f"{STALE_S:.0f} s old")


def check_store(tracker: Any, plan_id: str, what: str, queue: bool,
                say: Callable[[str], None] | None = None, poll_s: float = 10.0) -> None:
    """Refuse (or with ``queue`` wait) while a RUNNING parent of this plan has a fresh heartbeat
    from another driver."""
    flt = f"tags.`mmemb.plan_id` = '{plan_id}' and attributes.status = 'RUNNING'"
    while True:
        runs = tracker.client.search_runs([tracker.experiment_id], flt, max_results=20)
        holders = [h for r in runs if (h := live_driver(dict(r.data.tags))) is not None]
        if not holders:
            return
        if not queue:
            raise ValueError(f"{what} is already running: {describe(holders[0])} (its parent run "
                             "has a fresh heartbeat); wait for it to end, or add --queue to wait "
                             f"for it here{stale_in(holders[0])}")
        (say or _say)(f"waiting for {describe(holders[0])} to end (--queue)")
        say = lambda _line: None  # noqa: E731  (said once)
        time.sleep(poll_s)


class Heartbeat:
    """Refreshes ``mmemb.heartbeat`` on the parent while the driver lives (a daemon thread)."""

    def __init__(self, tracker: Any, parent: str, every_s: float = HEARTBEAT_S):
        self._stop = threading.Event()
        self.tracker, self.parent, self.every_s = tracker, parent, every_s
        self._beat()
        self._thread = threading.Thread(target=self._loop, name="mmemb-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        with contextlib.suppress(Exception):  # a store that stops answering: the journal's job
            self.tracker.client.set_tag(self.parent, HEARTBEAT_TAG, f"{time.time():.0f}")

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._beat()

    def stop(self) -> None:
        self._stop.set()


def running_driver(tracker: Any, parent: Any) -> dict[str, Any] | None:
    """The driver still running a parent run's plan, or None when none is: the holder of its
    lock beside a sqlite store, or the driver whose heartbeat on the parent is fresh (a server).
    Read without taking anything a driver would wait for."""
    from orchestrator.tracking.uris import sqlite_path

    tags = dict(parent.data.tags)
    if tags.get(HEARTBEAT_TAG) and (holder := live_driver(tags)) is not None:
        return holder
    db, plan = sqlite_path(tracker.uri), tags.get("mmemb.plan_id")
    if db is None or not plan:
        return None
    path = lock_paths(plan, db, "://")[0]
    if not path.is_file():
        return None
    with path.open("r") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(path) or {"pid": "?"}
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None


def store_drivers(db: Path) -> list[dict[str, Any]]:
    """The mmemb commands of this machine (or of one sharing the folder) running a plan on the
    sqlite store ``db`` now, other than this one: the holders of its driver locks. Read without
    taking anything a driver would wait for."""
    found = []
    folder = db.absolute().parent / f".{db.name}.drivers"
    for path in sorted(folder.glob("*.lock")) if folder.is_dir() else []:
        try:
            fh = path.open("r")
        except OSError:
            continue
        with fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(path) or {"pid": "?"}
                me = identity()
                if (holder.get("pid"), holder.get("host")) != (me["pid"], me["host"]):
                    found.append({**holder, "plan": path.stem})
                continue
            except OSError:
                continue
            fcntl.flock(fh, fcntl.LOCK_UN)
    return found


def name_store_users(e: Any) -> str:
    """The line of a ``StoreInUse`` (``orchestrator.tracking.client``) with an mmemb command
    among the lock's holders named as its driver lock names it: host, start, command line, plan
    (a colleague's table on the same store)."""
    drivers = store_drivers(e.path)
    known = {d["pid"]: f"{describe(d)}, an mmemb command running plan {d.get('plan', '?')} on "
             "this store," for d in drivers if isinstance(d.get("pid"), int)}
    return e.line(known, describe(drivers[0]) if drivers else "")
