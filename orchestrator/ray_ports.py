"""The ports a cluster file's `ray start` pins, checked before Ray starts.

A GCS port of 99999 started (Ray reads it modulo nothing: the head came up somewhere else), and
two services given one port, or a port another program holds, ended in Ray's 30-line traceback
from deep inside the node's start. :func:`check` refuses each in one line naming the flag and the
file to fix, before anything starts.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Sequence

SINGLE = ("--port", "--dashboard-port", "--ray-client-server-port", "--dashboard-agent-listen-port",
          "--dashboard-agent-grpc-port", "--dashboard-grpc-port", "--object-manager-port",
          "--node-manager-port", "--metrics-export-port", "--runtime-env-agent-port",
          "--gcs-server-port")
"""`ray start` flags that each give one port"""
WORKER_RANGE = ("--min-worker-port", "--max-worker-port")
DEFAULT_WORKER_PORTS = (10002, 19999)
"""Ray's default range for its workers' ports"""


def flags(command: Sequence[str]) -> dict[str, str]:
    """``--flag=value`` and ``--flag value`` of a command line, by flag."""
    out: dict[str, str] = {}
    for i, arg in enumerate(command):
        if m := re.fullmatch(r"(--[a-z-]+)=(.*)", arg):
            out[m[1]] = m[2]
        elif arg.startswith("--") and i + 1 < len(command) and not command[i + 1].startswith("--"):
            out[arg] = command[i + 1]
    return out


def _port(flag: str, value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise ValueError(f"`ray start {flag}={value}`: not a port (1-65535); fix it in the cluster "
                         "file's start command")
    return int(value)


def taken(port: int, wait_s: float = 10.0) -> bool:
    """Whether another program holds ``port`` on this machine (a socket bound to it); a port
    still held by a process that is stopping gets ``wait_s`` to come free."""
    deadline = time.monotonic() + wait_s
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not held
            try:
                s.bind(("", port))
                return False
            except OSError:
                pass
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.5)


def check(command: Sequence[str], wait_s: float = 10.0) -> list[tuple[str, int]]:
    """Refuse, in one line, a port flag of `ray start` that is no port, two flags with one port,
    a pinned port inside the workers' range, or one another program holds; -> (flag, port)s."""
    given = flags(command)
    pinned = [(f, _port(f, given[f])) for f in SINGLE if f in given and given[f] != "0"]
    lo, hi = (_port(f, given[f]) if f in given else d
              for f, d in zip(WORKER_RANGE, DEFAULT_WORKER_PORTS, strict=True))
    if lo > hi:
        raise ValueError(f"`ray start --min-worker-port={lo} --max-worker-port={hi}`: the range is "
                         "empty; fix it in the cluster file's start command")
    seen: dict[int, str] = {}
    for flag, port in pinned:
        if port in seen:
            raise ValueError(f"`ray start {seen[port]}={port} {flag}={port}`: two services on one "
                             "port; give each its own in the cluster file's start command")
        seen[port] = flag
        if lo <= port <= hi:
            raise ValueError(f"`ray start {flag}={port}`: inside the range Ray hands its workers "
                             f"({lo}-{hi}), where a worker may take it; pick a port outside it "
                             "(docs/cluster.md, \"Machines shared with other groups\")")
    for flag, port in pinned:
        if taken(port, wait_s):
            raise ValueError(f"`ray start {flag}={port}`: another program on this machine holds "
                             f"port {port} (`ss -ltnp 'sport = :{port}'` names it); stop it, or "
                             "give the cluster another port in its start command")
    return pinned
