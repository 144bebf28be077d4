"""Optuna search through Ray Tune, ended by a five-fresh-seed confirmation against MCSE.

    python -m orchestrator.search --space kdmcse_search --num-samples 8
    python -m orchestrator.search --space dalr_search --profile paper --address auto --resume

TPE (OptunaSearch) proposes margins, thresholds, lambda/mu and teacher combinations; ASHA stops
weak trials early on STS-B dev; the study lives in SQLite so a search resumes. Selection is on
dev only: the best configuration is then re-run on fresh seeds beside the baseline, and the
report tests the difference (selecting and reporting on the same runs would inflate it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.grids import Cell, Grid, SearchSpace, list_spaces, load_space, params_to_overrides


def _plan(space: SearchSpace, profile: str | None, params: dict[str, Any], seed: int,
          storage: str, cpus: float, gpus: float, max_failures: int, tag: str) -> dict[str, Any]:
    from orchestrator.launch import trial_plan
    from trainables.profiles import build_config

    sampled = params_to_overrides(space, params, profile=profile) if params else {}
    overrides = {**space.base, **sampled, "seed": seed}
    cfg = build_config(profile, overrides=overrides)
    return trial_plan(cfg, space.name, tag, storage, cpus, gpus, max_failures)


class PlannedSpace:
    """Optuna's define-by-run function for a space, returning the trial's run plan.

    A module-level class, not a closure: Tune pickles the searcher (with this) to checkpoint it.
    """

    def __init__(self, space: str, profile: str | None, seed: int, storage: str, cpus: float,
                 gpus: float, max_failures: int):
        self.args = (space, profile, seed, storage, cpus, gpus, max_failures)

    def __call__(self, trial) -> dict[str, Any]:
        name, profile, seed, storage, cpus, gpus, max_failures = self.args
        space = load_space(name)
        space.define(trial)  # the suggestions are recorded on the trial
        plan = _plan(space, profile, dict(trial.params), seed, storage, cpus, gpus,
                     max_failures, "search")
        plan["key"], plan["label"] = f"search/{trial.number}", f"search trial {trial.number}"
        return {"trial": plan}  # the same shape as a table's trials: one trial_fn serves both


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.search", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--space", help="a search space in search_spaces/ (see --list)")
    p.add_argument("--list", action="store_true")
    p.add_argument("--profile")
    p.add_argument("--num-samples", type=int, help="trials to sample (default: the space's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampler and of search trials")
    p.add_argument("--no-asha", action="store_true", help="run every trial to the end")
    p.add_argument("--address")
    p.add_argument("--cpus-per-trial", type=float, default=1.0)
    p.add_argument("--gpus-per-trial", type=float, default=None)
    p.add_argument("--max-concurrent", type=int)
    p.add_argument("--max-failures", type=int, default=1)
    p.add_argument("--tracking-uri")
    p.add_argument("--storage", default="runs")
    p.add_argument("--confirm-seeds", type=int, nargs="+",
                   help="fresh seeds for the confirmation re-run (default: the space's five)")
    p.add_argument("--resume", action="store_true", help="continue the study and the parent run")
    args = p.parse_args(argv)
    if args.list:
        for name, desc in list_spaces():
            print(f"{name:<16s} {desc}")
        return 0
    if not args.space:
        p.error("--space NAME is required (see --list)")
    try:
        return _run(args)
    except (ValueError, FileNotFoundError, ConnectionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    import optuna
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    from orchestrator.ablate import check_data
    from orchestrator.launch import (
        TRIAL_DRIVER_RESOURCES,
        Resources,
        make_callback,
        run_trials,
        trial_fn,
    )
    from orchestrator.outbox import Outbox
    from orchestrator.report import build_report
    from orchestrator.tracking import Tracker
    from trainables.profiles import build_config
    from trainables.train import init_ray, storage_uri

    space = load_space(args.space)
    n = args.num_samples if args.num_samples is not None else space.num_samples
    if n < 1:
        raise ValueError(f"--num-samples {n} must be >= 1")
    storage = storage_uri(args.storage)
    gpus = args.gpus_per_trial or 0.0
    base_cfg = build_config(args.profile, overrides=dict(space.base))
    baseline_cfg = build_config(args.profile, overrides=dict(space.baseline))
    template = _plan(space, args.profile, {}, args.seed, storage, args.cpus_per_trial, gpus,
                     args.max_failures, "search")
    check_data([template, {"run": baseline_cfg.to_dict()}])
    tracker = Tracker(args.tracking_uri)
    init_ray(args.address, log_to_driver=False)
    cluster = ray.cluster_resources()
    if args.gpus_per_trial is None and cluster.get("GPU", 0) > 0:
        gpus = 1.0
    resources = Resources(args.cpus_per_trial, gpus, args.max_concurrent)
    concurrency = resources.concurrency(cluster)

    plan_id = hashlib.sha256(json.dumps(
        [space.name, base_cfg.config_hash(), n, args.seed]).encode()).hexdigest()[:16]
    parent, resumed = tracker.start_parent(f"search {space.name}", "search", plan_id,
                                           {"mmemb.space": space.name}, resume=args.resume)
    # The study is SQLite on the driver's disk, even when checkpoints go to s3://.
    study_db = (Path(storage) if "://" not in storage else Path("runs").resolve()) / "optuna.db"
    study_db.parent.mkdir(parents=True, exist_ok=True)
    study_name = f"{space.name}-{plan_id}"
    outbox = Outbox(tracker, study_db.parent / f"mlflow-outbox-{plan_id}.jsonl")
    study = optuna.create_study(study_name=study_name, direction="maximize",
                                storage=f"sqlite:///{study_db}", load_if_exists=True)
    finished = len([t for t in study.trials if t.state.is_finished()])
    remaining = max(0, n - finished)
    print(f"{space.title}\n{n} search trials ({finished} done), up to {concurrency} at once; "
          f"MLflow parent {parent} at {tracker.uri}")

    define = PlannedSpace(space.name, args.profile, args.seed, storage, args.cpus_per_trial,
                          gpus, args.max_failures)

    if remaining:
        searcher = OptunaSearch(
            space=define, metric=space.metric, mode=space.mode, seed=args.seed,
            study_name=study_name, storage=optuna.storages.RDBStorage(f"sqlite:///{study_db}"),
        )
        scheduler = None if args.no_asha else ASHAScheduler(
            time_attr="training_iteration", grace_period=1, reduction_factor=2,
        )

        cb = make_callback(outbox, parent, total=remaining)
        tuner = tune.Tuner(
            tune.with_resources(trial_fn, TRIAL_DRIVER_RESOURCES),
            tune_config=tune.TuneConfig(
                search_alg=ConcurrencyLimiter(searcher, max_concurrent=concurrency),
                scheduler=scheduler, num_samples=remaining, metric=space.metric, mode=space.mode,
            ),
            run_config=tune.RunConfig(name=f"{space.name}-{plan_id}", storage_path=storage,
                                      callbacks=[cb], verbose=0),
        )
        tuner.fit()

    study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{study_db}")
    done = [t for t in study.trials if t.value is not None]
    if not done:
        raise ValueError("no search trial finished; see the Ray logs under " + storage)
    best = max(done, key=lambda t: t.value) if space.mode == "max" else min(done, key=lambda t: t.value)
    best_over = params_to_overrides(space, best.params, profile=args.profile)
    print(f"best of {len(done)}: {space.metric} {best.value:.2f} with {json.dumps(best.params)}")
    tracker.client.log_text(parent, json.dumps({"params": best.params, "value": best.value,
                                                "overrides": best_over}, indent=1), "best.json")

    # Confirmation: the best config and the baseline on the same fresh seeds.
    base_name = str(space.baseline.get("objective.method", "baseline")).upper()
    grid = Grid(
        name=space.name, title=f"{space.title}: best configuration vs baseline, fresh seeds",
        cells=(Cell(base_name, dict(space.baseline)),
               Cell(f"best of {space.name}", {**space.base, **best_over})),
        baseline=base_name, seeds=tuple(args.confirm_seeds or space.confirm_seeds),
    )
    from orchestrator.ablate import plan_trials
    from orchestrator.report import grid_spec

    _, plans = plan_trials(grid, args.profile, None, storage, args.cpus_per_trial, gpus,
                           args.max_failures)
    for pl in plans:
        pl["key"] = "confirm/" + pl["key"]
    spec = grid_spec(grid)
    tracker.log_artifact_text(parent, "grid.json", json.dumps(spec, indent=1))
    doneconf = tracker.finished_trials(parent)
    todo = [pl for pl in plans if pl["key"] not in doneconf]
    if todo:
        print(f"confirming on seeds {list(grid.seeds)}: {len(todo)} runs")
        cb = make_callback(outbox, parent, tracker.unfinished_trials(parent), total=len(todo))
        run_trials(todo, name=f"{space.name}-{plan_id}-confirm", storage=storage,
                   resources=resources, max_failures=args.max_failures, callbacks=[cb])
    out = Path(tempfile.mkdtemp(prefix=f"mmemb-{space.name}-"))
    analysis, md = build_report(tracker, parent, spec, out)
    ok = all(s.complete for s in analysis.status.values())
    tracker.end(parent, "FINISHED" if ok else "FAILED")
    print("\n" + md + f"\n\nreport: {out}/report.md (also in MLflow run {parent})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
