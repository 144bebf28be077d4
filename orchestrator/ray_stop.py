"""Stop one Ray instance on this machine, found by its temp dir, and leave every other one alone.

    python -m orchestrator.ray_stop --temp-dir /tmp/ray-mmemb-lab

``ray stop`` stops every Ray process of the machine (of this user; of everyone, as root): on a lab
machine shared with colleagues it stops their Ray as well. The cluster files start Ray with a
temp dir of their own (``ray start --temp-dir ...``); every process of that instance (GCS,
raylet, dashboard and its agents, log monitor, workers) names that folder on its command line,
so this stops exactly those: SIGTERM, then SIGKILL after ``--grace`` seconds for what is left.
``--list`` only prints them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from pathlib import Path


def _psutil():
    import importlib

    try:
        return importlib.import_module("psutil")
    except ImportError:  # Ray ships its own copy, on the path once ray is imported
        importlib.import_module("ray")
        return importlib.import_module("psutil")


def processes(temp_dir: str | os.PathLike) -> list:
    """This user's processes whose command line names ``temp_dir`` (as itself or a parent
    folder), and their descendants: Ray's agents and workers retitle themselves
    (``ray::DashboardAgent``, ``ray::IDLE``) but are children of its raylet or dashboard."""
    psutil = _psutil()
    folder = str(Path(temp_dir).expanduser().absolute()).rstrip("/")
    pattern = re.compile(re.escape(folder) + r"(?=/|\s|$|\")")
    me, uid = os.getpid(), os.getuid()
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "uids"]):
        try:
            if p.pid == me or p.info["uids"] is None or p.info["uids"].real != uid:
                continue
            if pattern.search(" ".join(p.info["cmdline"] or [])):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
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


def stop(temp_dir: str | os.PathLike, grace_s: float = 10.0) -> tuple[int, int]:
    """-> (processes found, processes that needed SIGKILL)."""
    psutil = _psutil()

    found = processes(temp_dir)
    for p in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(found, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return len(found), len(alive)


def parser() -> argparse.ArgumentParser:
    from orchestrator import cli
    from trainables.runtime.checks import NON_NEGATIVE
    from trainables.runtime.command_line import option

    p = cli.parser("orchestrator.ray_stop", __doc__)
    p.add_argument("--temp-dir", required=True, help="the --temp-dir its `ray start` was given")
    p.add_argument("--grace", type=option(NON_NEGATIVE), default=10.0,
                   help="seconds before SIGKILL (default 10)")
    p.add_argument("--list", action="store_true", help="print the processes, stop nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.list:
        for proc in processes(args.temp_dir):
            print(proc.pid, proc.name())
        return 0
    n, killed = stop(args.temp_dir, args.grace)
    if not n:
        print(f"no Ray process of {args.temp_dir} is running on this machine")
    else:
        print(f"stopped the {n} Ray process(es) of {args.temp_dir} on this machine"
              + (f" ({killed} needed SIGKILL)" if killed else "") + "; other Ray instances "
              "were left alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
