"""Stop one Ray instance on this machine, found by its temp dir, and leave every other one alone.

    python -m orchestrator.ray_stop --temp-dir /tmp/ray-mmemb-lab

``ray stop`` stops every Ray process of the machine (of this user; of everyone, as root): on a lab
machine shared with colleagues it stops their Ray as well. The cluster files start Ray with a
temp dir of their own (``ray start --temp-dir ...``); every process of that instance (GCS,
raylet, dashboard and its agents, log monitor, workers) names that folder on its command line,
so this stops exactly those: SIGTERM, then SIGKILL after ``--grace`` seconds for what is left.
``--list`` only prints them.

    python -m orchestrator.ray_stop

Without ``--temp-dir``: stops what the embedded Ray of a driver that was killed (SIGKILL, a lost
shell) left running on this machine, as the next table or search does when it starts; a Ray
whose driver still runs is left alone (``trainables/runtime/local_ray.py``).
"""

from __future__ import annotations

import argparse
import sys

from trainables.runtime.local_ray import ORPHAN_GRACE_S, clean_orphans, orphans, processes, stop

__all__ = ["main", "processes", "stop"]


def parser() -> argparse.ArgumentParser:
    from orchestrator import cli
    from trainables.runtime.checks import NON_NEGATIVE
    from trainables.runtime.command_line import option

    p = cli.parser("orchestrator.ray_stop", __doc__)
    p.add_argument("--temp-dir", help="the --temp-dir its `ray start` was given (default: the "
                   "embedded Rays of this user's killed drivers)")
    p.add_argument("--grace", type=option(NON_NEGATIVE), default=None,
                   help="seconds before SIGKILL (default 10; 2 for a killed driver's Ray)")
    p.add_argument("--list", action="store_true", help="print the processes, stop nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.temp_dir is None:
        if args.list:
            for folder, _ in orphans():
                for proc in processes(folder):
                    print(proc.pid, proc.name(), folder)
            return 0
        if not clean_orphans(print, ORPHAN_GRACE_S if args.grace is None else args.grace):
            print("no Ray left running by a killed driver of this user on this machine")
        return 0
    if args.list:
        for proc in processes(args.temp_dir):
            print(proc.pid, proc.name())
        return 0
    n, killed = stop(args.temp_dir, 10.0 if args.grace is None else args.grace)
    if not n:
        print(f"no Ray process of {args.temp_dir} is running on this machine")
    else:
        print(f"stopped the {n} Ray process(es) of {args.temp_dir} on this machine"
              + (f" ({killed} needed SIGKILL)" if killed else "") + "; other Ray instances "
              "were left alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
