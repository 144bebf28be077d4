"""The Ray instances of this machine, found by their temp dir; the embedded Ray's own temp dir;
and what a driver that was killed left running.

A driver killed with SIGKILL cannot stop its embedded Ray: its GCS and raylet end by themselves,
but Ray's dashboard and runtime-env agents live on, orphans of no command, each holding memory
and a port. So every driver starts its embedded Ray in a temp dir of its own,
``<temp>/mmemb-ray-<uid>/<driver pid>`` (``<temp>`` as Ray picks it: $RAY_TMPDIR, $TMPDIR or
/tmp), with ``driver.json`` naming the driver (pid, start time, host). The next driver (or
``python -m orchestrator.ray_stop``) finds the folders whose driver is gone, stops what still
runs there and says so in one line, then removes the folder. A folder whose driver lives, one of
another host, another user's processes and Ray instances started any other way are never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path


def _psutil():
    import importlib

    try:
        return importlib.import_module("psutil")
    except ImportError:  # Ray ships its own copy, on the path once ray is imported
        importlib.import_module("ray")
        return importlib.import_module("psutil")


def processes(temp_dir: str | os.PathLike) -> list:
    """This user's processes of the Ray instance in ``temp_dir``, for a Ray whose start was not
    recorded (``trainables.runtime.launched`` knows a recorded one exactly): Ray's own programs
    (its binaries, its Python services, its retitled ``ray::`` workers and agents) that name the
    folder on their command line or hold a file open under it (a dead raylet's orphans hold
    their logs), and the descendants of those. A process that merely mentions the folder (a
    shell, a ``tail -f`` of its logs) is no program of Ray's and is left alone."""
    psutil = _psutil()
    folder = str(Path(temp_dir).expanduser().absolute()).rstrip("/")
    pattern = re.compile(re.escape(folder) + r"(?=/|\s|$|\")")
    me, uid = os.getpid(), os.getuid()
    out = []
    for p in psutil.process_iter(["pid", "name", "cmdline", "uids", "exe"]):
        try:
            if p.pid == me or p.info["uids"] is None or p.info["uids"].real != uid:
                continue
            if not _ray_program(p.info):
                continue
            if pattern.search(" ".join(p.info["cmdline"] or [])) or _holds_a_file_in(p, folder):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    seen = {p.pid for p in out}
    for root in list(out):
        try:
            kids = root.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for k in kids:
            if k.pid not in seen and k.pid != me:
                seen.add(k.pid)
                out.append(k)
    return out


def ray_dirs() -> tuple[str, ...]:
    """Where this Ray's programs live (its package folder), without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("ray")
    return tuple(str(Path(d).resolve()) for d in (spec.submodule_search_locations or ())) \
        if spec else ()


def _ray_program(info: dict) -> bool:
    """Ray's own program: a binary or script of Ray's package, ``python -m ray...``, or a
    process Ray retitled (``ray::IDLE``, ``ray::DashboardAgent``)."""
    cmd = info.get("cmdline") or []
    if (info.get("name") or "").startswith("ray::") or (cmd and cmd[0].startswith("ray::")):
        return True
    inside = tuple(d + "/" for d in ray_dirs())
    exe = info.get("exe") or ""
    if inside and exe.startswith(inside):
        return True
    for i, arg in enumerate(cmd[1:4], 1):  # python [-u] [-m ray.x | /.../ray/x.py]
        if inside and arg.startswith(inside):
            return True
        if arg.startswith("ray.") and i > 1 and cmd[i - 1] == "-m":
            return True
    return False


def _holds_a_file_in(p, folder: str) -> bool:
    """A retitled Ray process (``ray::...``) with a file open under ``folder`` (its logs)."""
    return (p.info["name"] or "").startswith("ray::") and any(
        f.path == folder or f.path.startswith(folder + "/") for f in p.open_files())


def _gone(p) -> bool:
    psutil = _psutil()
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stop(temp_dir: str | os.PathLike, grace_s: float = 10.0) -> tuple[int, int]:
    """-> (processes found, processes that needed SIGKILL)."""
    return stop_processes(processes(temp_dir), grace_s)


def stop_processes(found: list, grace_s: float = 10.0) -> tuple[int, int]:
    """SIGTERM, then SIGKILL for what is left after ``grace_s``; a zombie (an orphan whose new
    parent has not reaped it yet) counts as stopped. -> (found, needed SIGKILL)."""
    psutil = _psutil()
    for p in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(found, timeout=grace_s)
    alive = [p for p in alive if not _gone(p)]
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return len(found), len(alive)


# --- the embedded Ray's own temp dir ------------------------------------------------------------
MARKER = "driver.json"


def drivers_root() -> Path:
    """``<temp>/mmemb-ray-<uid>``: the folder holding each driver's embedded-Ray temp dir."""
    from ray._common.utils import get_default_system_temp_dir

    return Path(get_default_system_temp_dir()) / f"mmemb-ray-{os.getuid()}"


def _ours(folder: Path) -> bool:
    """A real folder of this user (not a link, not another user's folder of that name)."""
    try:
        st = folder.lstat()
    except OSError:
        return False
    import stat

    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def own_temp_dir() -> Path | None:
    """This driver's temp dir for its embedded Ray, created and marked with who runs it; None
    where it cannot be ours (a folder of that name owned by someone else, a read-only temp, a
    path too long for Ray's sockets): Ray then picks its default, as before."""
    psutil = _psutil()
    root = drivers_root()
    # Ray's sockets live at <temp dir>/session_<date>_<pid>/sockets/plasma_store; a Unix socket
    # path holds 107 bytes
    if len(str(root)) > 36:
        return None
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        if not _ours(root):
            return None
        mine = root / str(os.getpid())
        mine.mkdir(exist_ok=True)
        me = {"pid": os.getpid(), "create_time": psutil.Process().create_time(),
              "host": socket.gethostname(), "started": time.time(),
              "command": " ".join([sys.executable, *sys.argv])[:500]}
        tmp = mine / f".{MARKER}.tmp"
        tmp.write_text(json.dumps(me))
        os.replace(tmp, mine / MARKER)
    except OSError:
        return None
    return mine


def _driver(folder: Path) -> dict:
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return {}


def _alive(pid: int, create_time: float | None) -> bool:
    """The process ``pid`` runs and is the one recorded (not a later one given the same id)."""
    psutil = _psutil()
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(p.create_time() - float(create_time)) < 1.0
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True


def orphans() -> list[tuple[Path, dict]]:
    """The embedded-Ray temp dirs of this user and host whose driver is gone, with its record."""
    root = drivers_root()
    if not _ours(root):
        return []
    out = []
    for folder in sorted(root.iterdir()):
        if not folder.name.isdigit() or not _ours(folder):
            continue
        d = _driver(folder)
        if d.get("host", socket.gethostname()) != socket.gethostname():
            continue  # a temp shared with another machine: its drivers are not ours to judge
        pid = int(d.get("pid", folder.name))
        if _alive(pid, d.get("create_time")):  # this driver's own, too (not an earlier one of its id)
            continue
        if not d and time.time() - folder.stat().st_mtime < 60:
            continue  # a driver of a reused id may be writing its record right now
        out.append((folder, d))
    return out


ORPHAN_GRACE_S = 2.0
"""SIGTERM to SIGKILL for a dead driver's Ray: its agents wait on a raylet that is gone and let
a longer grace pass (10 s) before a SIGKILL, which the next command would wait out"""


def clean_orphans(say=None, grace_s: float = ORPHAN_GRACE_S) -> list[str]:
    """Stop what the gone drivers' embedded Rays left running, remove their temp dirs, and say
    one line per driver whose Ray still ran; -> those lines."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    lines = []
    for folder, d in orphans():
        found = processes(folder)
        names = sorted({_name(p) for p in found})
        n, killed = stop_processes(found, grace_s)
        shutil.rmtree(folder, ignore_errors=True)
        if n:
            started = d.get("started")
            since = time.strftime(" started %Y-%m-%d %H:%M:%S", time.localtime(started)) \
                if started else ""
            line = (f"note: stopped {n} Ray process(es) ({', '.join(names)}) left running by "
                    f"driver process {d.get('pid', folder.name)}{since}, which ended without "
                    f"stopping its Ray (killed?)" + (f"; {killed} needed SIGKILL" if killed else ""))
            lines.append(line)
            say(line)
    return lines


def _name(p) -> str:
    try:
        return p.name()
    except Exception:
        return "?"


def forget_own_temp_dir(folder: Path) -> None:
    """At a normal exit, after Ray's own shutdown: what it left running stops, the temp dir goes."""
    with contextlib.suppress(Exception):  # at exit: never a reason for a traceback
        stop_processes(processes(folder), grace_s=5.0)
    shutil.rmtree(folder, ignore_errors=True)
