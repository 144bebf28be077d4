"""An inter-process lock on a file, for caches that several workers may build at the same time.

Two DDP workers (or two trials on one node) that find the demo corpus or a store's decoded cache
missing must not both build it: the second would replace files the first is already reading.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if needed) for the ``with`` block."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes, even on a crash
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def lock_holders(path: str | Path) -> list[tuple[int, str]]:
    """The processes of this machine holding a lock on ``path`` right now, as ``(pid, 'WRITE' or
    'READ')``, writers first: read from the kernel's table (``/proc/locks``, which lists SQLite's
    POSIX locks as well as ``flock``s), matched by device and inode. Empty where that table is
    not readable (not Linux) or the holder is elsewhere (another machine sharing the folder)."""
    import os

    try:
        st = os.stat(path)
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    me = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    found: dict[int, str] = {}
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->":  # "->": a process waiting for the lock
            continue
        kind, pid, where = fields[3], fields[4], fields[5]
        mine = where == me and pid.isdigit() and int(pid) not in (0, os.getpid())
        if mine and found.get(int(pid)) != "WRITE":  # OFD locks show pid -1: no process named
            found[int(pid)] = kind
    return sorted(found.items(), key=lambda kv: (kv[1] != "WRITE", kv[0]))


def process_line(pid: int, limit: int = 160) -> str:
    """``process 4242 (python hold.py mlflow.db)``: a process of this machine and its command
    line, as far as ``/proc`` shows it."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return f"process {pid}"
    args = [a for a in raw.decode(errors="replace").split("\0") if a]
    if args and Path(args[0]).name.startswith("python"):
        args[0] = "python"
    cmd = " ".join(" ".join(args).split())  # one line, even for a `python -c` script
    cmd = cmd if len(cmd) <= limit else cmd[: limit - 3] + "..."
    return f"process {pid} ({cmd})" if cmd else f"process {pid}"
