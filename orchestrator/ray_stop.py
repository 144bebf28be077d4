"""Stop the cluster's Ray and MLflow on this machine (on the head: on every machine), nothing else.

    python -m orchestrator.ray_stop --temp-dir /tmp/ray-mmemb-lab

``ray stop`` stops every Ray process of the machine (of this user; of everyone, as root): on a lab
machine shared with colleagues it stops their Ray as well. The cluster files start Ray and the
MLflow server through ``python -m orchestrator.ray_start``, which runs each in a session of its
own recorded in the cluster's temp dir; this stops exactly those sessions (Ray's GCS, raylet,
dashboard, agents and workers; MLflow's server and workers): SIGTERM, then SIGKILL after
``--grace`` seconds for what is left. A colleague's Ray, a shell or a ``tail -f`` that merely
names the folder are left alone. A Ray of the temp dir that was started some other way (by hand,
or by an older cluster file) is found by its programs: Ray's own binaries and services that name
the folder, and their children.

On the cluster's head (the machine whose recorded Ray is a ``ray start --head``) of a ``local``
provider, it stops the whole cluster: the head's Ray first (its autoscaler would restart the
workers), then every worker listed in ``~/ray_bootstrap_config.yaml``, over SSH with the key `ray
up` gave the head (``~/ray_bootstrap_key.pem``), then the rest (MLflow). ``--this-node`` stops
this machine's only: the start commands use it, since `ray up` again restarts the head in place
and leaves the workers to their own start commands. ``--list`` only prints what it would stop.
In the nodes' shells `ray stop` means this command (``~/.mmemb_env``), `ray down`'s included.

    python -m orchestrator.ray_stop

Without ``--temp-dir``: stops what the embedded Ray of a driver that was killed (SIGKILL, a lost
shell) left running on this machine, as the next table or search does when it starts; a Ray
whose driver still runs is left alone (``trainables/runtime/local_ray.py``).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trainables.runtime.local_ray import ORPHAN_GRACE_S, clean_orphans, orphans, processes, stop

__all__ = ["main", "processes", "stop"]

BOOTSTRAP = Path("~/ray_bootstrap_config.yaml")
"""what `ray up` leaves on the head: the cluster file as Ray completed it"""
BOOTSTRAP_KEY = Path("~/ray_bootstrap_key.pem")
SSH_TIMEOUT_S = 300


def parser() -> argparse.ArgumentParser:
    from orchestrator import cli
    from trainables.runtime.checks import NON_NEGATIVE
    from trainables.runtime.command_line import option

    p = cli.parser("orchestrator.ray_stop", __doc__)
    p.add_argument("--temp-dir", help="the cluster's Ray temp dir (default: the embedded Rays of "
                   "this user's killed drivers)")
    p.add_argument("--this-node", action="store_true",
                   help="this machine only, also on the cluster's head (its workers keep running)")
    p.add_argument("--grace", type=option(NON_NEGATIVE), default=None,
                   help="seconds before SIGKILL (default 10; 2 for a killed driver's Ray)")
    p.add_argument("--list", action="store_true", help="print the processes, stop nothing")
    return p


def workers() -> tuple[list[str], str]:
    """The workers of the `local` cluster this machine heads (``user@address``) and the SSH key
    to reach them; ([], '') when this is no such head."""
    import yaml

    path = BOOTSTRAP.expanduser()
    try:
        cfg = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return [], ""
    provider = cfg.get("provider") or {}
    if provider.get("type") != "local":
        return [], ""  # a cloud's workers stop with their instances (`ray down`)
    user = (cfg.get("auth") or {}).get("ssh_user", "")
    return ([f"{user}@{ip}" if user else str(ip) for ip in provider.get("worker_ips") or []],
            str(BOOTSTRAP_KEY.expanduser()))


def stop_worker(target: str, key: str, temp_dir: str) -> str:
    """`ray stop` (this cluster's, that machine only) on one worker, over SSH; -> what it said."""
    remote = (f". ~/.mmemb_env && python -m orchestrator.ray_stop --temp-dir "
              f"{shlex.quote(temp_dir)} --this-node")
    cmd = ["ssh", "-i", key, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
           "-o", "ConnectTimeout=30", "-o", "StrictHostKeyChecking=no",
           "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", target, remote]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=SSH_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not stop the cluster's Ray there ({e}): run `ray stop` there"
    said = " ".join((done.stdout + done.stderr).split())
    if done.returncode != 0:
        return f"could not stop the cluster's Ray there (ssh exit {done.returncode}: {said[-300:]}); " \
               "run `ray stop` there"
    return said


def describe(counts: dict[str, int], unrecorded: int) -> str:
    parts = [f"{n} {'Ray' if name == 'ray' else name} process(es)" for name, n in counts.items() if n]
    if unrecorded:
        parts.append(f"{unrecorded} Ray process(es) of the temp dir started outside the cluster's "
                     "start commands")
    return ", ".join(parts)


def stop_here(temp_dir: str, names: set[str] | None, grace: float) -> tuple[dict[str, int], int]:
    """Stop this machine's recorded sessions (of ``names``; None: all) and, with Ray, what else
    of Ray runs in the temp dir; -> (processes per recorded name, unrecorded Ray processes)."""
    from trainables.runtime import launched

    recs = [r for r in launched.records(temp_dir) if names is None or r.name in names]
    counts = launched.stop(recs, grace)
    unrecorded = 0
    if names is None or "ray" in names:
        unrecorded, _ = stop(temp_dir, grace)
        # as Ray's own stop does: `ray status` and $RAY_ADDRESS then find no stale address
        (Path(temp_dir) / "ray_current_cluster").unlink(missing_ok=True)
    return counts, unrecorded


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
    from trainables.runtime import launched

    temp = str(Path(args.temp_dir).expanduser().absolute())
    grace = 10.0 if args.grace is None else args.grace
    recs = launched.records(temp)
    head = any(r.head for r in recs)
    if args.list:
        for rec in recs:
            for proc in launched.members(rec):
                print(proc.pid, proc.name(), rec.name)
        for proc in processes(temp):
            print(proc.pid, proc.name(), "ray (not recorded)")
        return 0
    targets, key = workers() if head and not args.this_node else ([], "")
    # the head's Ray (its autoscaler) first: it would start the workers' Ray again
    counts, unrecorded = stop_here(temp, {"ray"} if targets else None, grace)
    if targets:
        with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
            said = list(pool.map(lambda t: stop_worker(t, key, temp), targets))
        for target, line in zip(targets, said, strict=True):
            print(f"worker {target.split('@')[-1]}: {line}", flush=True)
        more, _ = stop_here(temp, None, grace)
        for name, n in more.items():
            counts[name] = counts.get(name, 0) + n
    done = describe(counts, unrecorded)
    if not done:
        print(f"nothing of the cluster of {temp} runs on this machine")
    else:
        print(f"stopped the cluster's {done} of {temp} on this machine; other Ray instances and "
              "processes were left alone", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
