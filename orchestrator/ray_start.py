"""Start the cluster's Ray (or its MLflow server) so that its stop finds exactly what was started.

    python -m orchestrator.ray_start ray start --head --temp-dir=/tmp/ray-mmemb-lab --port=26379 ...
    python -m orchestrator.ray_start --service mlflow --temp-dir /tmp/ray-mmemb-lab \\
        --log ~/mlflow/server.log --ready http://127.0.0.1:25000/health -- mlflow server ...

The cluster files' start commands run through this: the command runs in a session of its own,
recorded in the cluster's temp dir (``<temp dir>/mmemb-launched/``), and ``python -m
orchestrator.ray_stop --temp-dir ...`` (what `ray stop` and `ray down` run on the nodes) stops
those sessions and nothing else: not a colleague's Ray on the same machine, not a shell or a
``tail -f`` that mentions the folder. A `ray start` is waited for (it returns once Ray is up) and
its exit status passed on (a failed start is tried again, ``--attempts``: Ray gives its raylet
30 s to register, which a loaded machine misses, and Ray's autoscaler never retries a node whose
start failed); it needs the cluster's own ``--temp-dir``, and its port flags are
checked first (``orchestrator.ray_ports``: a port, one per service, free on this machine). A ``--service`` runs in the
background, its output appended to ``--log``; with ``--ready`` the command waits until that URL
answers from this server (not from another one on the port) and fails, stopping it, if it does
not within ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

__all__ = ["main"]


def parser() -> argparse.ArgumentParser:
    from orchestrator import cli
    from trainables.runtime.checks import POSITIVE, count
    from trainables.runtime.command_line import option

    p = cli.parser("orchestrator.ray_start", __doc__)
    p.add_argument("--service", metavar="NAME",
                   help="a server to run in the background (its name in the record), not `ray start`")
    p.add_argument("--temp-dir", help="the cluster's Ray temp dir, where the record goes (default: "
                   "the --temp-dir of the `ray start` command)")
    p.add_argument("--log", help="--service: the file its output is appended to")
    p.add_argument("--ready", metavar="URL", help="--service: wait until this URL answers 200")
    p.add_argument("--timeout", type=option(POSITIVE), default=180.0,
                   help="--service: seconds to wait for --ready (default 180)")
    p.add_argument("--attempts", type=option(count(1)), default=3, metavar="N",
                   help="`ray start`: start it again after a failure, up to N times in all "
                   "(default 3)")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the command: `ray start ...`, or the service's after --")
    return p


def temp_dir_of(command: list[str]) -> str | None:
    """The ``--temp-dir`` a `ray start` command line gives."""
    for i, arg in enumerate(command):
        if m := re.fullmatch(r"--temp-dir=(.+)", arg):
            return m[1]
        if arg == "--temp-dir" and i + 1 < len(command):
            return command[i + 1]
    return None


def main(argv: list[str] | None = None) -> int:
    from trainables.runtime import launched

    p = parser()
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command to start: give `ray start ...`, or --service NAME ... -- COMMAND")
    if args.service is None:
        if command[:2] != ["ray", "start"]:
            p.error(f"expected a `ray start ...` command, got {' '.join(command[:3])!r}; a server "
                    "of the cluster's runs with --service NAME ... -- COMMAND")
        temp = temp_dir_of(command) or args.temp_dir
        if temp is None:
            p.error("`ray start` needs the cluster's own --temp-dir (its stop finds it there, and "
                    "a colleague's Ray on the machine keeps Ray's default one)")
        from orchestrator import ray_ports

        try:  # a port Ray would take badly: one line now, not its traceback from the node's start
            ray_ports.check(command)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        for attempt in range(1, args.attempts + 1):
            rc = launched.launch_and_wait(command, temp, "ray")  # a failed one stops what it began
            if rc == 0 or attempt == args.attempts:
                return rc
            # Ray's start gives its raylet 30 s to register: a loaded machine misses that, and
            # Ray's autoscaler never sets up a node whose start failed once
            print(f"note: `ray start` exited {rc}; starting it again (attempt {attempt + 1} of "
                  f"{args.attempts})", file=sys.stderr, flush=True)
            time.sleep(5)
        return 1
    if args.temp_dir is None or args.log is None:
        p.error("--service needs --temp-dir (the cluster's, where the record goes) and --log")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.service) or args.service == "ray":
        p.error(f"--service {args.service!r}: a plain name (letters, digits, - _ .), not 'ray'")
    # a restart in place: the service this temp dir recorded before stops first
    old = [r for r in launched.records(args.temp_dir) if r.name == args.service]
    if old:
        launched.stop(old, 10.0)
    return launched.launch_service(command, args.temp_dir, args.service,
                                   Path(args.log).expanduser(), args.ready, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
