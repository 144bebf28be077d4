"""Optuna search through Ray Tune, with seed noise in the selection, ended by a confirmation.

    python -m orchestrator.search --space kdmcse_search --num-samples 8
    python -m orchestrator.search --space dalr_search --profile paper --address auto --resume
    python -m orchestrator.search --space search_spaces/my_space.py --study-storage postgresql://...

1. **Rounds.** TPE asks a batch of configurations at once; each trains on ``--search-seeds``
   seeds, and all of them train as one array (one Tune trial). Halfway through the run the array
   keeps the better half of the configurations, judged on the mean STS-B dev of their seeds
   (successive halving inside the array: the pruned members leave it, so the freed compute is
   real), and the rest train to the end. Each configuration's value is its seeds' mean best dev.
2. **Finalists.** The best ``--finalists`` configurations train again on fresh seeds; the winner
   is the best mean over all its seeds, and the report says whether its margin over the
   runner-up is larger than the seed noise, or that the search could not tell them apart.
3. **Confirmation.** The winner and the baseline train on the space's five fresh seeds (one
   array), and the report tests the difference as a table does: selecting and reporting on the
   same runs would inflate the gain.

The study lives in an Optuna RDB storage (``--study-storage``, by default SQLite beside the
checkpoints): several drivers may attach to one study, and ``--resume`` continues it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import cli

ROUND_SIZE = 8
"""configurations asked at once (one array per round on one device)"""


@dataclass(frozen=True)
class SearchArgs:
    num_samples: int
    search_seeds: tuple[int, ...]
    finalists: int
    finalist_seeds: tuple[int, ...]
    confirm_seeds: tuple[int, ...]
    seed: int
    round_size: int
    halving: bool
    study_storage: str | None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.search", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--space", help="a search in search_spaces/ (see --list), or a .py file with SPACE")
    p.add_argument("--list", action="store_true", help="list (and check) the searches")
    p.add_argument("--num-samples", type=int, help="configurations to try (default: the space's)")
    p.add_argument("--search-seeds", type=int, nargs="+", default=[0, 1],
                   help="seeds every configuration trains on during the search (default 0 1)")
    p.add_argument("--finalists", type=int, default=3,
                   help="best configurations re-trained on --finalist-seeds (default 3)")
    p.add_argument("--finalist-seeds", type=int, nargs="+", default=[10, 11, 12])
    p.add_argument("--confirm-seeds", type=int, nargs="+",
                   help="fresh seeds for the confirmation against the baseline (default: the space's five)")
    p.add_argument("--seed", type=int, default=0, help="seed of the TPE sampler")
    p.add_argument("--round-size", type=int, default=ROUND_SIZE,
                   help=f"configurations asked at once (default {ROUND_SIZE})")
    p.add_argument("--no-halving", action="store_true", help="train every configuration to the end")
    p.add_argument("--study-storage",
                   help="Optuna RDB URL shared by several drivers (default: sqlite beside --storage)")
    cli.add_campaign_args(p)
    args = p.parse_args(argv)
    if args.list:
        return cli.guarded(_list)
    if not args.space:
        p.error("--space NAME is required (see --list)")
    return cli.guarded(lambda: _run(args))


def _list() -> int:
    from orchestrator.registry import list_text

    print(list_text(grids=False))
    return 0


def search_args(args: argparse.Namespace, space) -> SearchArgs:
    """The search's own options, refused at once when they make no sense (never after the search)."""
    from orchestrator.grids import check_seeds

    def seeds(name: str, values: Sequence[int], least: int) -> tuple[int, ...]:
        check_seeds(values, name, least)
        return tuple(values)

    n = args.num_samples if args.num_samples is not None else space.num_samples
    if n < 2:
        raise ValueError(f"--num-samples {n} must be >= 2 (a search compares configurations)")
    if args.finalists < 2:
        raise ValueError(f"--finalists {args.finalists} must be >= 2 (the winner and a runner-up)")
    if args.round_size < 1:
        raise ValueError(f"--round-size {args.round_size} must be >= 1")
    search = seeds("--search-seeds", args.search_seeds, 1)
    final = seeds("--finalist-seeds", args.finalist_seeds, 1)
    confirm = seeds("--confirm-seeds", args.confirm_seeds or space.confirm_seeds, 2)
    if set(confirm) & (set(search) | set(final)):
        raise ValueError(f"--confirm-seeds {list(confirm)} must be fresh: they overlap the search "
                         "or finalist seeds (selecting and reporting on the same seeds inflates the gain)")
    return SearchArgs(n, search, min(args.finalists, n), final, confirm, args.seed,
                      args.round_size, not args.no_halving, args.study_storage)


def _run(args: argparse.Namespace) -> int:
    import optuna

    from orchestrator.campaign import Campaign, Session
    from orchestrator.plan import plan_id
    from orchestrator.preflight import check_campaign
    from orchestrator.registry import load_space
    from orchestrator.validate import validate_space
    from trainables.profiles import build_config, profile_overrides

    opts = cli.options(args)
    space = load_space(args.space)
    sa = search_args(args, space)
    profile_name, prof = profile_overrides(opts.profile)

    def build(overrides):
        return build_config(opts.profile, overrides=dict(overrides))

    validate_space(space, build=build, exhaustive=True, profile=opts.profile)  # every option
    planner = Planner(space, opts.profile, build)
    probe = [planner.member("probe", {}, sa.search_seeds[0], "probe"),
             *planner.confirmation({}, sa.confirm_seeds)]
    data = check_campaign(probe, opts)  # everything, before Ray or MLflow
    pid = plan_id("search", space.name, probe, profile_name, sa.num_samples, sa.search_seeds, sa.seed)
    storage_url = sa.study_storage or _default_study(opts.storage)
    spec = planner.confirm_spec(sa.confirm_seeds, bool(prof.get("data.demo")))
    campaign = Campaign("search", space.name, f"search {space.name}", pid, (), spec,
                        {"mmemb.space": space.name, "mmemb.profile": opts.profile or "default"})
    if args.dry_run:
        print(f"{space.title}\n{sa.num_samples} configurations x {len(sa.search_seeds)} seeds in "
              f"rounds of {sa.round_size}, then {sa.finalists} finalists x {len(sa.finalist_seeds)} "
              f"seeds, then the winner and the baseline on seeds {list(sa.confirm_seeds)}; study "
              f"{storage_url}")
        print("\n".join(f"checked: {line}" for line in data.checked))
        print("dry run: everything checked, nothing started")
        return 0
    steps = data.total_steps[probe[0].key]
    session = Session(campaign, opts, {})
    print(f"{space.title}\n{sa.num_samples} configurations x {len(sa.search_seeds)} seeds; "
          f"MLflow parent {session.parent} at {session.tracker.uri}; study {storage_url}", flush=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=f"{space.name}-{pid}", storage=optuna.storages.RDBStorage(storage_url),
        direction="maximize", load_if_exists=True,
        sampler=optuna.samplers.TPESampler(seed=sa.seed, constant_liar=True))
    rung = _rung(steps, planner.eval_every) if sa.halving else None
    status = _rounds(session, study, planner, sa, pid, rung)
    if status is not None:
        return status
    return _finish(session, study, planner, sa, pid, spec)


def _default_study(storage: str) -> str:
    root = Path(storage if "://" not in storage else "runs").resolve()
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'optuna.db'}"


def _rung(total_steps: int, eval_every: int) -> tuple[tuple[int, ...], float] | None:
    """Halve once, at the first evaluation at or after half the run: dev scores need that long to
    separate (bench/README.md, 'search pruning'); before it the ranking is mostly seed noise."""
    step = math.ceil(total_steps / 2 / eval_every) * eval_every
    return ((step,), 2.0) if step < total_steps else None


class Planner:
    """Members of a search: (configuration, seed) runs built from the space's params."""

    def __init__(self, space, profile: str | None, build):
        self.space, self.profile, self.build = space, profile, build
        self.eval_every = build(dict(space.base)).eval_every

    def overrides(self, params: dict[str, Any]) -> dict[str, Any]:
        from orchestrator.spaces import params_to_overrides

        return params_to_overrides(self.space, params, profile=self.profile) if params else dict(self.space.base)

    def member(self, key: str, params: dict[str, Any], seed: int, group: str, cell: str = "",
               overrides: dict[str, Any] | None = None):
        from orchestrator.plan import MemberPlan

        ov = {**(self.overrides(params) if overrides is None else overrides), "seed": seed}
        name = cell or group
        return MemberPlan(f"{key}/seed-{seed}", name, seed, self.build(ov), f"{name} seed {seed}",
                          f"{name} | seed {seed}", group=group)

    def trial_members(self, prefix: str, number: int, params: dict[str, Any], seeds: Sequence[int]):
        return [self.member(f"{prefix}/{number}", params, s, f"trial-{number}", f"trial {number}")
                for s in seeds]

    @property
    def baseline_name(self) -> str:
        return str(self.space.baseline.get("objective.method", "baseline")).upper()

    def confirmation(self, params: dict[str, Any], seeds: Sequence[int]):
        best = f"best of {self.space.name}"
        base = [self.member("confirm/baseline", {}, s, "", self.baseline_name,
                            overrides=dict(self.space.baseline)) for s in seeds]
        win = [self.member("confirm/best", params, s, "", best) for s in seeds]
        return base + win

    def confirm_spec(self, seeds: Sequence[int], demo: bool) -> dict[str, Any]:
        from orchestrator.grids import STS_COLUMNS

        return {"name": self.space.name,
                "title": f"{self.space.title}: best configuration vs baseline, fresh seeds",
                "baseline": self.baseline_name, "seeds": list(seeds), "columns": list(STS_COLUMNS),
                "plot": "bars", "xlabel": None, "note": "", "x": {}, "published": {},
                "cells": [self.baseline_name, f"best of {self.space.name}"], "demo": demo}


def _rounds(session, study, planner: Planner, sa: SearchArgs, pid: str, rung) -> int | None:
    """Ask, train and tell until the study holds ``num_samples`` configurations."""
    from optuna.trial import TrialState

    rnd = 0
    while True:
        mine = [t for t in study.get_trials(deepcopy=False)
                if t.state == TrialState.RUNNING and t.user_attrs.get("plan_id") == pid]
        if mine:  # left RUNNING by an interrupted run of this plan: train them again
            batch = [(t.number, t.params) for t in mine]
        else:
            left = sa.num_samples - sum(1 for t in study.get_trials(deepcopy=False)
                                        if t.state != TrialState.FAIL)
            if left <= 0:
                return None
            batch = []
            for _ in range(min(sa.round_size, left)):
                t = study.ask()
                planner.space.define(t)
                t.set_user_attr("plan_id", pid)
                batch.append((t.number, dict(t.params)))
        members = [m for n, params in batch for m in planner.trial_members("search", n, params, sa.search_seeds)]
        rnd += 1
        print(f"round {rnd}: {len(batch)} configurations x {len(sa.search_seeds)} seeds", flush=True)
        out = session.run(members, f"{planner.space.name}-{pid}-round", halving=rung)
        if out.interrupted:
            return session.interrupted()
        results = session.tracker.member_results(session.parent)
        for n, _ in batch:
            runs = [results.get(f"search/{n}/seed-{s}", {}) for s in sa.search_seeds]
            values = [r["metrics"]["best_stsb_dev"] for r in runs
                      if r.get("status") == "FINISHED" and "best_stsb_dev" in r.get("metrics", {})]
            trial = _live(study, n)
            trial.set_user_attr("seed_values", values)
            if len(values) < len(sa.search_seeds):
                study.tell(trial, state=TrialState.FAIL)
            elif any(r.get("stopped") for r in runs):
                trial.report(sum(values) / len(values), rung[0][0] if rung else 0)
                study.tell(trial, state=TrialState.PRUNED)
            else:
                study.tell(trial, sum(values) / len(values))


def _live(study, number: int):
    """The RUNNING trial ``number`` as an ``optuna.trial.Trial`` (to set attributes, report, tell),
    also when it was asked by an earlier, interrupted driver of this plan."""
    import optuna

    (frozen,) = [t for t in study.get_trials(deepcopy=False) if t.number == number]
    return optuna.trial.Trial(study, frozen._trial_id)


def _finish(session, study, planner: Planner, sa: SearchArgs, pid: str, spec: dict[str, Any]) -> int:
    from optuna.trial import TrialState

    from orchestrator import search_report

    done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if len(done) < 2:
        session.tracker.end(session.parent, "FAILED")
        raise ValueError(f"only {len(done)} configuration(s) finished the search; a search needs 2 "
                         "to compare (see the failed runs in MLflow)")
    finalists = sorted(done, key=lambda t: -t.value)[: sa.finalists]
    members = [m for t in finalists for m in planner.trial_members("final", t.number, t.params, sa.finalist_seeds)]
    print(f"finalists: trials {[t.number for t in finalists]} on seeds {list(sa.finalist_seeds)}", flush=True)
    out = session.run(members, f"{planner.space.name}-{pid}-finalists")
    if out.interrupted:
        return session.interrupted()
    results = session.tracker.member_results(session.parent)
    seed_values = {}
    for t in finalists:
        extra = [results.get(f"final/{t.number}/seed-{s}", {}).get("metrics", {}).get("best_stsb_dev")
                 for s in sa.finalist_seeds]
        seed_values[t.number] = list(t.user_attrs.get("seed_values", [])) + [v for v in extra if v is not None]
    verdict = search_report.Verdict.of(seed_values)
    winner = next(t for t in finalists if t.number == verdict.winner)
    session.tracker.client.log_dict(session.parent, {
        "trial": winner.number, "params": winner.params, "overrides": planner.overrides(winner.params),
        "seed_values": seed_values[winner.number]}, "best.json")
    print(f"winner: trial {winner.number} {winner.params}\n{verdict.sentence()}", flush=True)
    confirm = planner.confirmation(winner.params, sa.confirm_seeds)
    session.tracker.log_artifact_text(session.parent, "grid.json", json.dumps(spec, indent=1))
    print(f"confirming on seeds {list(sa.confirm_seeds)}: the winner and {planner.baseline_name}", flush=True)
    out = session.run(confirm, f"{planner.space.name}-{pid}-confirm")
    if out.interrupted:
        return session.interrupted()
    extra_md = search_report.write(session, study, planner, finalists, seed_values, verdict, pid)
    return session.finish(spec, extra_md=extra_md)


if __name__ == "__main__":
    cli.quiet_env()
    sys.exit(main())
