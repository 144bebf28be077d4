"""The command-line arguments tables and searches share, and how bad ones are refused."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from orchestrator.run.options import Options


def _array_size(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not 'auto' or a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} must be >= 1 (1 = one run per trial)")
    return n


def add_campaign_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", help="demo | paper | FILE.yaml (default: demo unless configured)")
    p.add_argument("--address", help="Ray cluster to join ('auto'); default: embedded local Ray")
    p.add_argument("--array-size", type=_array_size, default=None, metavar="N|auto",
                   help="runs trained together as one vectorised array (default auto: as few "
                        "arrays as the CPUs/GPUs allow; 1: one run per trial)")
    p.add_argument("--cpus-per-trial", type=float, default=1.0,
                   help="CPUs per array (per Train worker)")
    p.add_argument("--gpus-per-trial", type=float, default=None,
                   help="GPUs per array; fractions pack arrays (0.5: two per GPU). Default: 1 if "
                        "the cluster has GPUs, else 0")
    p.add_argument("--max-concurrent", type=int, help="cap on arrays running at once")
    p.add_argument("--max-failures", type=int, default=1,
                   help="restarts of a failed array from its last checkpoint")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite ./mlflow.db)")
    p.add_argument("--storage", default="runs",
                   help="Ray results and checkpoints: a folder (shared by all nodes) or s3://...")
    p.add_argument("--wait-for-workers", type=float, default=900,
                   help="seconds to wait for an autoscaling cluster's workers to join")
    p.add_argument("--keep-checkpoints", action="store_true",
                   help="keep every checkpoint with optimiser state (default: once an array "
                        "finishes, only each run's best weights are kept)")
    p.add_argument("--resume", action="store_true",
                   help="continue the latest run of this plan: only missing runs train")
    p.add_argument("--dry-run", action="store_true",
                   help="check everything, print the runs, arrays and resources, then exit")


def options(args: argparse.Namespace) -> Options:
    """The parsed arguments as campaign options; impossible values refused in one line."""
    if args.cpus_per_trial <= 0:
        raise ValueError(f"--cpus-per-trial {args.cpus_per_trial:g} must be > 0")
    if args.gpus_per_trial is not None and args.gpus_per_trial < 0:
        raise ValueError(f"--gpus-per-trial {args.gpus_per_trial:g} must be >= 0")
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise ValueError(f"--max-concurrent {args.max_concurrent} must be >= 1")
    if args.max_failures < 0:
        raise ValueError(f"--max-failures {args.max_failures} must be >= 0")
    if args.wait_for_workers < 0:
        raise ValueError(f"--wait-for-workers {args.wait_for_workers:g} must be >= 0")
    return Options(
        profile=args.profile, address=args.address, cpus_per_trial=args.cpus_per_trial,
        gpus_per_trial=args.gpus_per_trial, max_concurrent=args.max_concurrent,
        max_failures=args.max_failures, tracking_uri=args.tracking_uri, storage=args.storage,
        wait_for_workers=args.wait_for_workers, resume=args.resume, array_size=args.array_size,
        keep_checkpoints=args.keep_checkpoints,
    )


def quiet_env() -> None:
    """For a command's own process, as ``trainables.train`` sets for its workers: no tokenizers
    fork warning, no progress bar each time a student is loaded."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


BAD_INPUT = (ValueError, FileNotFoundError, ConnectionError, OSError)


def guarded(run: Callable[[], int]) -> int:
    """Run a command; bad input is one 'error:' line and exit 2, Ctrl-C exit 130."""
    try:
        return run()
    except BAD_INPUT as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted; run the same command with --resume to continue", file=sys.stderr)
        return 130
