"""What a cluster's start commands launched on this machine, recorded so that its stop finds exactly that.

A lab machine is shared: a colleague's Ray, their shells and a `tail -f` of our logs run beside the
cluster, as the same account. A command line that names the cluster's temp dir says nothing about
whose a process is, so the cluster's processes are known by how they were started instead: each
start command (`ray start`, the MLflow server) runs in a session of its own (setsid), and the
session is recorded in ``<temp dir>/mmemb-launched/<name>-<sid>.json`` with the processes it held
once started (pid and start time). Everything Ray or MLflow starts later inherits the session
(Ray's workers and agents, gunicorn's workers); what leaves it (a Ray job's entrypoint, which Ray
starts in a new session) is a descendant of a member. No other process can join a session, and
its id is never given to a new one while a member lives, so "a recorded member still lives in the
session" proves the session is the recorded one and not a later one that reuses its number.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainables.runtime.local_ray import _psutil, stop_processes

FOLDER = "mmemb-launched"


@dataclass(frozen=True)
class Launched:
    """One recorded session: what a start command launched."""

    name: str
    """'ray' for `ray start`, else the service's name ('mlflow')"""
    sid: int
    argv: tuple[str, ...]
    members: tuple[tuple[int, float], ...]
    """(pid, create time) of the processes it held once started"""
    started: float = 0.0
    host: str = ""
    path: Path | None = field(default=None, compare=False)

    @property
    def head(self) -> bool:
        """A `ray start --head`: this machine runs the cluster's head."""
        return self.name == "ray" and "--head" in self.argv

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "sid": self.sid, "argv": list(self.argv),
                           "members": [list(m) for m in self.members], "started": self.started,
                           "host": self.host})


def folder(temp_dir: str | os.PathLike) -> Path:
    return Path(temp_dir).expanduser().absolute() / FOLDER


def records(temp_dir: str | os.PathLike) -> list[Launched]:
    """The sessions recorded in ``temp_dir`` on this machine (a temp dir another host shares,
    on NFS say, holds theirs too: those are skipped)."""
    out = []
    here = socket.gethostname()
    for path in sorted(folder(temp_dir).glob("*.json")):
        try:
            d = json.loads(path.read_text())
            rec = Launched(str(d["name"]), int(d["sid"]), tuple(d["argv"]),
                           tuple((int(p), float(t)) for p, t in d["members"]),
                           float(d.get("started", 0)), str(d.get("host", "")), path)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # half-written or foreign: not a record of ours
        if rec.host in ("", here):
            out.append(rec)
    return out


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _snapshot(sid: int) -> list:
    """The live processes of session ``sid`` (this user's)."""
    psutil = _psutil()
    out = []
    for p in psutil.process_iter(["pid", "uids", "status"]):
        try:
            if (p.info["uids"] is not None and p.info["uids"].real == os.getuid()
                    and p.info["status"] != psutil.STATUS_ZOMBIE and _session(p.pid) == sid):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def _alive_member(rec: Launched) -> bool:
    """A recorded member still runs in the recorded session: the session is still this one."""
    psutil = _psutil()
    for pid, created in rec.members:
        try:
            p = psutil.Process(pid)
            if (abs(p.create_time() - created) < 1.0 and _session(pid) == rec.sid
                    and p.status() != psutil.STATUS_ZOMBIE):
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return False


def members(rec: Launched) -> list:
    """The processes of a recorded session now, their descendants included; [] once the session
    is over (no recorded member lives), whatever now runs under its old number."""
    psutil = _psutil()
    if not _alive_member(rec):
        return []
    found = _snapshot(rec.sid)
    seen = {p.pid for p in found} | {os.getpid()}
    for root in list(found):
        with contextlib.suppress(psutil.NoSuchProcess):
            for kid in root.children(recursive=True):
                if kid.pid not in seen:
                    seen.add(kid.pid)
                    found.append(kid)
    return found


def record(temp_dir: str | os.PathLike, name: str, sid: int, argv: Sequence[str]) -> Launched:
    """Record session ``sid`` (as it is now) as what ``name`` launched."""
    now = []
    for p in _snapshot(sid):
        with contextlib.suppress(Exception):
            now.append((p.pid, p.create_time()))
    rec = Launched(name, sid, tuple(argv), tuple(now), time.time(), socket.gethostname())
    where = folder(temp_dir)
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}-{sid}.json"
    tmp = where / f".{path.name}.tmp"
    tmp.write_text(rec.to_json())
    os.replace(tmp, path)
    return Launched(rec.name, rec.sid, rec.argv, rec.members, rec.started, rec.host, path)


def forget(rec: Launched) -> None:
    if rec.path is not None:
        with contextlib.suppress(OSError):
            rec.path.unlink()


def stop(recs: Sequence[Launched], grace_s: float = 10.0) -> dict[str, int]:
    """Stop these sessions (SIGTERM, SIGKILL after ``grace_s``) and forget them; -> name ->
    processes stopped (0: the session had already ended)."""
    found = {rec.name: members(rec) for rec in recs}
    everything = list({p.pid: p for ps in found.values() for p in ps}.values())
    stop_processes(everything, grace_s)
    for rec in recs:
        forget(rec)
    counts: dict[str, int] = {}
    for rec in recs:
        counts[rec.name] = counts.get(rec.name, 0) + len(found[rec.name])
    return counts


def launch_and_wait(argv: Sequence[str], temp_dir: str | os.PathLike, name: str = "ray") -> int:
    """Run ``argv`` (`ray start ...`, which returns once its daemons are up) in a session of
    its own, then record what it left running; -> its exit status. A start that fails stops
    whatever it had started."""
    proc = subprocess.Popen(list(argv), start_new_session=True)
    rc = proc.wait()
    if rc != 0:
        stop_processes(_snapshot(proc.pid), 5.0)
        return rc
    record(temp_dir, name, proc.pid, argv)
    return 0


def launch_service(argv: Sequence[str], temp_dir: str | os.PathLike, name: str, log: Path,
                   ready: str | None = None, timeout_s: float = 180.0,
                   say: Callable[[str], None] | None = None) -> int:
    """Start a server (``argv`` runs until stopped) in a session of its own, its output to
    ``log``, and record it; with ``ready``, wait until that URL answers 200 from *this* server
    (a server of someone else's on the same port does not count: ours must still run). -> 0, or
    1 after stopping it when it ends or never answers."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(list(argv), start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT)
    rec = record(temp_dir, name, proc.pid, argv)
    if ready is None:
        return 0
    port = urllib.parse.urlsplit(ready).port
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        rec = record(temp_dir, name, proc.pid, argv)  # its workers too, as they fork
        if _answers(ready) and (port is None or _listens(rec, port)):
            return 0
        time.sleep(0.5)
    why = (f"exited with status {proc.poll()}" if proc.poll() is not None
           else f"did not answer {ready} within {timeout_s:.0f} s")
    stop([rec], 5.0)
    tail = log.read_text(errors="replace").splitlines()[-15:]
    say(f"error: {name} {why}; the end of {log}:\n" + "\n".join(f"  {ln}" for ln in tail))
    return 1


def _listens(rec: Launched, port: int) -> bool:
    """A process of this session listens on ``port`` (the one answering is ours)."""
    psutil = _psutil()
    for p in members(rec):
        with contextlib.suppress(psutil.Error):
            if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   for c in p.net_connections(kind="tcp")):
                return True
    return False


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False
