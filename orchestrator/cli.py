"""The command-line arguments tables and searches share, and how bad ones are refused.

Every command's parser is a ``trainables.runtime.command_line.Parser`` (a refusal is one ``error:`` line) and every
numeric option carries its check (``trainables.runtime.command_line.option``), so nonsense such as
``--gpus-per-trial nan`` is refused while parsing. What needs more than one value, a file or the
store is refused by :func:`guarded`: one ``error:`` line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from orchestrator.run.options import Options
from trainables.runtime.checks import NON_NEGATIVE, POSITIVE, count
from trainables.runtime.command_line import Parser, one_line, option, writable_folder


def parser(prog: str, doc: str | None) -> Parser:
    """A command's parser: one-line refusals, the module docstring as its help."""
    return Parser(prog=f"python -m {prog}", description=doc,
                  formatter_class=argparse.RawDescriptionHelpFormatter)


def add_campaign_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", help="demo | paper | FILE.yaml (default: demo unless configured)")
    p.add_argument("--address", help="Ray cluster to join ('auto'); default: embedded local Ray")
    p.add_argument("--array-size", type=option(count(1, "1 = one run per trial"), auto=None),
                   default=None, metavar="N|auto",
                   help="runs trained together as one vectorised array (default auto: as few "
                        "arrays as the CPUs/GPUs allow; 1: one run per trial)")
    p.add_argument("--cpus-per-trial", type=option(POSITIVE), default=1.0,
                   help="CPUs per worker of an array (an array has num_workers workers)")
    p.add_argument("--gpus-per-trial", type=option(NON_NEGATIVE), default=None,
                   help="GPUs per worker of an array; fractions pack arrays (0.5: two per GPU). "
                        "Default: 1 if the cluster has GPUs, else 0")
    p.add_argument("--max-concurrent", type=option(count(1)), help="cap on arrays running at once")
    p.add_argument("--max-failures", type=option(count(0)), default=1,
                   help="restarts of a failed array from its last checkpoint")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite ./mlflow.db)")
    p.add_argument("--artifact-location", default=None, metavar="URI",
                   help="with a postgresql:// or mysql:// --tracking-uri: where the experiment "
                        "keeps its models and reports, e.g. s3://BUCKET/mlflow (default: ./mlruns "
                        "on this machine; a tracking server decides this itself)")
    p.add_argument("--storage", default="runs",
                   help="Ray results and checkpoints: a folder (shared by all nodes) or s3://...")
    p.add_argument("--wait-for-workers", type=option(NON_NEGATIVE), default=900,
                   help="seconds to wait for an autoscaling cluster's workers to join")
    p.add_argument("--keep-checkpoints", action="store_true",
                   help="keep every checkpoint with optimiser state (default: once an array "
                        "finishes, only each run's best weights are kept)")
    p.add_argument("--resume", action="store_true",
                   help="continue the latest run of this plan: only missing runs train")
    p.add_argument("--queue", action="store_true",
                   help="when another command is running this plan on this store, wait for it "
                        "to end instead of refusing (then continue as asked)")
    p.add_argument("--dry-run", action="store_true",
                   help="check everything, print the runs, arrays and resources, then exit")
    p.add_argument("--methods", nargs="+", default=[], metavar="FILE.py|MODULE",
                   help="methods of your own to load first, so grids and searches can name them "
                        "(docs/methods.md); a grid file may also import its method itself")


def options(args: argparse.Namespace) -> Options:
    """The parsed arguments as campaign options (their ranges were checked while parsing). Loads
    ``--methods`` first: every command calls this before it reads its grid or search."""
    from trainables.objectives.methods import load_methods
    from trainables.runtime import ray_address

    ray_address.check(args.address)  # a cluster nobody serves: refused now, not after the plan
    load_methods(getattr(args, "methods", None) or [])
    return Options(
        profile=args.profile, address=args.address, cpus_per_trial=args.cpus_per_trial,
        gpus_per_trial=args.gpus_per_trial, max_concurrent=args.max_concurrent,
        max_failures=args.max_failures, tracking_uri=args.tracking_uri,
        artifact_location=getattr(args, "artifact_location", None), storage=args.storage,
        wait_for_workers=args.wait_for_workers, resume=args.resume, array_size=args.array_size,
        keep_checkpoints=args.keep_checkpoints, queue=getattr(args, "queue", False),
    )


def check_out(out: str | os.PathLike, option_name: str = "--out") -> Path:
    """A folder a command will write into exists or can be created, and is writable."""
    return writable_folder(out, option_name)


def quiet_env() -> None:
    """For a command's own process, as ``trainables.train`` sets for its workers: no tokenizers
    fork warning, no progress bar each time a student is loaded."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


BAD_INPUT = (ValueError, FileNotFoundError, ConnectionError, OSError)


def guarded(run: Callable[[], int]) -> int:
    """Run a command; bad input (and an MLflow store's refusal) is one 'error:' line and exit 2,
    Ctrl-C or SIGTERM exit 130. A command refused (or stopped) before its run went ahead leaves
    no cache it built on the way, e.g. the demo world (``trainables.runtime.created``)."""
    from trainables.runtime import created

    created.keep()  # what an earlier command of this process built is not this one's
    from orchestrator.run.driver import name_store_users
    from orchestrator.tracking.store_lock import StoreInUse, busy_line
    from orchestrator.tracking.uris import masked_text

    try:
        rc = run()
    except StoreInUse as e:  # a colleague's table among the holders: named by its driver lock
        created.discard()
        print(f"error: {name_store_users(e)}", file=sys.stderr)
        return 2
    except BAD_INPUT as e:
        created.discard()
        print(f"error: {masked_text(str(e))}", file=sys.stderr)  # a URI's password: never shown
        return 2
    except KeyboardInterrupt as e:
        created.discard()
        print(f"\n{interrupted_line(e)}", file=sys.stderr)
        return 130
    except Exception as e:
        busy = busy_line(e)  # a sqlite store another process keeps locked: not MLflow's fault
        if busy is None and not type(e).__module__.startswith("mlflow"):
            created.keep()
            raise  # a bug: its traceback is what a developer needs
        created.discard()
        said = name_store_users(busy) if busy else f"MLflow: {masked_text(one_line(e))}"
        print(f"error: {said}", file=sys.stderr)
        return 2
    if rc == 2:  # refused without raising (a dry run whose plan does not fit this machine)
        created.discard()
    created.keep()  # checked and kept (a dry run that passed): the run will reuse them
    return rc


def interrupted_line(e: KeyboardInterrupt) -> str:
    """What an interrupt that reached the command's top left behind: ``--resume`` only when a
    parent run was started (its unfinished runs ended KILLED and wait for it); before that,
    nothing was written, so there is nothing to resume. ``e``'s own words (an interrupted
    import names its file and line) come first."""
    from orchestrator.tracking.client import STARTED

    said = str(e)
    if STARTED:
        return f"{said or 'interrupted'}; run the same command with --resume to continue"
    return (f"{said or 'interrupted before anything started'}: nothing was started or written, "
            "so there is nothing to --resume; run the command again")
