"""Reproduce a paper table: every cell x seed plus the baseline, on Ray Tune, into MLflow.

    python -m orchestrator.ablate --grid table3                 # demo profile on this machine
    python -m orchestrator.ablate --grid table3 --profile paper --address auto --gpus-per-trial 0.25
    python -m orchestrator.ablate --grid table3 --resume        # only the missing (cell, seed) runs
    python -m orchestrator.ablate --list

Everything that can be checked is checked before Ray starts a trial: the grid, the profile, every
trial's config, the data paths, the resources and the tracking server.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.grids import Grid, expand, list_grids, load_grid


def plan_trials(grid: Grid, profile: str | None, seeds: list[int] | None, storage: str,
                cpus: float, gpus: float, max_failures: int) -> tuple[str, list[dict[str, Any]]]:
    """(plan id, one dict per trial) with every RunConfig built and validated."""
    from orchestrator.launch import trial_plan
    from trainables.profiles import build_config, profile_overrides

    profile_name, _ = profile_overrides(profile)
    plans = []
    for t in expand(grid, seeds):
        try:
            cfg = build_config(profile, overrides=dict(t.overrides))
        except (ValueError, FileNotFoundError) as e:
            raise ValueError(f"grid {grid.name}, cell {t.cell!r}: {e}") from None
        plans.append(trial_plan(cfg, grid.name, t.cell, storage, cpus, gpus, max_failures,
                                key=t.key, run_name=f"{t.cell} | seed {t.seed}"))
    blob = json.dumps([profile_name, [(p["key"], p["config_hash"]) for p in plans]])
    return hashlib.sha256(blob.encode()).hexdigest()[:16], plans


def check_data(plans: list[dict[str, Any]]) -> None:
    """Open every distinct data source once (demo corpus generated here, before Ray starts)."""
    from trainables.config import RunConfig
    from trainables.data import check_dims, load_data

    seen = set()
    for p in plans:
        cfg = RunConfig.from_dict(p["run"])
        key = json.dumps([p["run"]["data"], p["run"]["encoder"], p["run"]["objective"]],
                         sort_keys=True)
        if key not in seen:
            seen.add(key)
            check_dims(cfg, load_data(cfg))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.ablate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", help="a table in search_spaces/ (see --list), or a .py file with GRID")
    p.add_argument("--list", action="store_true", help="list the grids, one line each")
    p.add_argument("--profile", help="demo | paper | FILE.yaml (default: demo unless configured)")
    p.add_argument("--seeds", type=int, nargs="+", help="override the grid's seeds (default 0-4)")
    p.add_argument("--address", help="Ray cluster to join ('auto'); default: embedded local Ray")
    p.add_argument("--cpus-per-trial", type=float, default=1.0)
    p.add_argument("--gpus-per-trial", type=float, default=None,
                   help="GPUs per trial; fractions pack runs (0.25: four per GPU). Default: 1 if "
                        "the cluster has GPUs, else 0")
    p.add_argument("--max-concurrent", type=int, help="cap on trials running at once")
    p.add_argument("--max-failures", type=int, default=1,
                   help="restarts of a failed run from its last checkpoint")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite ./mlflow.db)")
    p.add_argument("--storage", default="runs",
                   help="Ray results and checkpoints: a folder (shared by all nodes) or s3://...")
    p.add_argument("--wait-for-workers", type=float, default=900,
                   help="seconds to wait for an autoscaling cluster's GPU workers to join")
    p.add_argument("--resume", action="store_true",
                   help="continue the latest run of this plan: only missing trials run")
    args = p.parse_args(argv)

    if args.list:
        for name, desc in list_grids():
            print(f"{name:<16s} {desc}")
        return 0
    if not args.grid:
        p.error("--grid NAME is required (see --list)")
    try:
        return _run(args)
    except (ValueError, FileNotFoundError, ConnectionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from orchestrator.launch import Resources, make_callback, run_trials, wait_for_resources
    from orchestrator.outbox import Outbox
    from orchestrator.report import build_report, grid_spec
    from orchestrator.tracking import Tracker
    from trainables.train import init_ray, storage_uri

    grid = load_grid(args.grid)
    if args.seeds is not None and len(set(args.seeds)) != len(args.seeds):
        raise ValueError(f"--seeds {args.seeds} has duplicates; give each seed once")
    if args.cpus_per_trial <= 0:
        raise ValueError(f"--cpus-per-trial {args.cpus_per_trial} must be > 0")
    if args.gpus_per_trial is not None and args.gpus_per_trial < 0:
        raise ValueError(f"--gpus-per-trial {args.gpus_per_trial} must be >= 0")
    storage = storage_uri(args.storage)
    gpus = args.gpus_per_trial if args.gpus_per_trial is not None else 0.0
    plan_id, plans = plan_trials(grid, args.profile, args.seeds, storage, args.cpus_per_trial,
                                 gpus, args.max_failures)
    check_data(plans)
    tracker = Tracker(args.tracking_uri)
    init_ray(args.address, log_to_driver=False)
    import ray

    cluster = ray.cluster_resources()
    if args.gpus_per_trial is None and cluster.get("GPU", 0) > 0:
        gpus = 1.0
        for pl in plans:
            pl["gpus"] = gpus
    resources = Resources(args.cpus_per_trial, gpus, args.max_concurrent)
    wait_for_resources(resources, args.address, args.wait_for_workers)
    concurrency = resources.concurrency(ray.cluster_resources())  # raises on impossible ones

    seeds = list(args.seeds) if args.seeds else list(grid.seeds)
    spec = grid_spec(grid) | {"seeds": seeds, "demo": bool(plans[0]["run"]["data"]["demo"])}
    parent, resumed = tracker.start_parent(
        f"{grid.name} ({plans[0]['run']['data']['demo'] and 'demo' or 'custom'})", "table",
        plan_id, {"mmemb.grid": grid.name, "mmemb.profile": args.profile or "default"},
        resume=args.resume)
    if not resumed:
        tracker.log_artifact_text(parent, "grid.json", json.dumps(spec, indent=1))
    done = tracker.finished_trials(parent)
    todo = [pl for pl in plans if pl["key"] not in done]
    print(f"{grid.title}\n{len(plans)} trials ({len(grid.cells)} cells x {len(seeds)} seeds), "
          f"{len(done)} already done, {len(todo)} to run, up to {concurrency} at once")
    print(f"MLflow parent run {parent} at {tracker.uri}")
    outbox = Outbox(tracker, Path(storage if "://" not in storage else "runs").resolve()
                    / f"mlflow-outbox-{plan_id}.jsonl")
    if todo:
        cb = make_callback(outbox, parent, tracker.unfinished_trials(parent), total=len(todo))
        run_trials(todo, name=f"{grid.name}-{plan_id}", storage=storage, resources=resources,
                   max_failures=args.max_failures, callbacks=[cb])
    if outbox.offline:
        print(f"\nMLflow stopped answering during the table; {outbox.kept} results are kept in "
              f"{outbox.journal}.\nWhen it is back, upload them with:\n  {outbox.upload_command()}"
              f"\nthen render the table with:\n  python -m orchestrator.report --run {parent} "
              f"--tracking-uri {tracker.uri}", file=sys.stderr)
        return 3
    if args.address:  # withdraw any autoscaler request so idle GPU workers can stop
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[])
    outdir = Path(tempfile.mkdtemp(prefix=f"mmemb-{grid.name}-"))
    analysis, md = build_report(tracker, parent, spec, outdir)
    complete = all(s.complete for s in analysis.status.values())
    tracker.end(parent, "FINISHED" if complete else "FAILED")
    print("\n" + md)
    print(f"\nreport: {outdir}/report.md (also in MLflow run {parent})")
    print(f"open the runs: mlflow ui --backend-store-uri {tracker.uri}  (then http://127.0.0.1:5000)")
    if not complete:
        print("some trials failed; rerun with --resume to run only those", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
