"""A search's procedure on a campaign session: TPE rounds as arrays, finalists, confirmation.

``python -m orchestrator.search`` parses and checks its options, opens a
``orchestrator.run.campaign.Session`` and hands it to :func:`rounds` and :func:`finish`:

1. **Rounds.** TPE asks ``round_size`` configurations at once; each trains on the search seeds,
   all of them as one array, halved once at mid-run on the mean dev score of their seeds.
2. **Finalists.** The best configurations train again on fresh seeds; the winner is the best mean
   over all its seeds (``orchestrator.results.search_report.Verdict``).
3. **Confirmation.** The winner and the baseline train on the space's fresh seeds, tested as a
   table is.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.tracking.uris import masked


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


def default_study(storage: str) -> str:
    root = Path(storage if "://" not in storage else "runs").resolve()
    return f"sqlite:///{root / 'optuna.db'}"


def check_study(url: str, option: str = "--study-storage") -> str:
    """An Optuna RDB URL that can be opened: a database URL whose driver is installed, or a
    sqlite file whose folder can be written. Checked before anything starts (nothing created)."""
    from sqlalchemy.engine import make_url

    from trainables.runtime.command_line import writable_file

    try:
        u = make_url(url)
        backend = u.get_backend_name()
    except Exception:
        raise ValueError(f"{option} {url}: not a database URL; use sqlite:///PATH/optuna.db, "
                         "postgresql://USER@HOST/DB or mysql://...") from None
    if backend == "sqlite":
        if not u.database or u.database == ":memory:":
            raise ValueError(f"{option} {url}: an in-memory study is lost when the command ends; "
                             "use sqlite:///PATH/optuna.db")
        writable_file(u.database, option)
    else:
        from orchestrator.tracking.database import check_database

        shown = masked(url)
        check_database(url, option, fallback="sqlite:///PATH/optuna.db")
        return f"study {shown}: database answers"
    return f"study {url}: openable"


def open_study_storage(url: str):
    """The Optuna storage of ``url``, its sqlite folder created first."""
    import optuna
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() == "sqlite" and u.database:
        Path(u.database).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.RDBStorage(url)


def rung_of(total_steps: int, eval_every: int) -> tuple[tuple[int, ...], float] | None:
    """Halve once, at the first evaluation at or after half the run: dev scores need that long to
    separate (bench/README.md, 'search pruning'); before it the ranking is mostly seed noise."""
    step = math.ceil(total_steps / 2 / eval_every) * eval_every
    return ((step,), 2.0) if step < total_steps else None


class Planner:
    """Members of a search: (configuration, seed) runs built from the space's params."""

    def __init__(self, space, profile: str | None, build):
        from orchestrator.spec.spaces import reference

        self.space, self.profile, self.build = space, profile, build
        self.eval_every = build(dict(space.base)).eval_every
        self.reference = reference(space, profile)
        """the space's base on this profile: what its relative ranges scale by"""

    def start(self) -> dict[str, Any] | None:
        """The params of the profile's own configuration, which the search tries first."""
        if self.space.start is None:
            return None
        return dict(self.space.start(self.build(dict(self.space.base))))

    def ask(self, study):
        from orchestrator.spec.spaces import define_on

        t = study.ask()
        define_on(self.space, t, self.profile, self.reference)
        return t

    def overrides(self, params: dict[str, Any]) -> dict[str, Any]:
        from orchestrator.spec.spaces import params_to_overrides

        return params_to_overrides(self.space, params, profile=self.profile) if params else dict(self.space.base)

    def member(self, key: str, params: dict[str, Any], seed: int, group: str, cell: str = "",
               overrides: dict[str, Any] | None = None):
        from orchestrator.spec.plan import RunPlan

        ov = {**(self.overrides(params) if overrides is None else overrides), "seed": seed}
        name = cell or group
        return RunPlan(f"{key}/seed-{seed}", name, seed, self.build(ov), f"{name} seed {seed}",
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
        from orchestrator.spec.grids import STS_COLUMNS

        return {"name": self.space.name,
                "title": f"{self.space.title}: best configuration vs baseline, fresh seeds",
                "baseline": self.baseline_name, "seeds": list(seeds), "columns": list(STS_COLUMNS),
                "plot": "bars", "xlabel": None, "note": "", "x": {}, "published": {},
                "cells": [self.baseline_name, f"best of {self.space.name}"], "demo": demo}


def rounds(session, study, planner: Planner, sa: SearchArgs, pid: str, rung) -> int | None:
    """Ask, train and tell until the study holds ``num_samples`` configurations."""
    from optuna.trial import TrialState

    start = planner.start()
    if start is not None and not study.get_trials(deepcopy=False):  # a new study
        study.enqueue_trial(start, user_attrs={"start": 1})
    rnd = 0
    while True:
        mine = [t for t in study.get_trials(deepcopy=False)
                if t.state == TrialState.RUNNING and t.user_attrs.get("plan_id") == pid]
        if mine:  # left RUNNING by an interrupted run of this plan: train them again
            batch = [(t.number, t.params) for t in mine]
        else:
            left = sa.num_samples - sum(1 for t in study.get_trials(deepcopy=False)
                                        if t.state not in (TrialState.FAIL, TrialState.WAITING))
            if left <= 0:
                return None
            batch = []
            for _ in range(min(sa.round_size, left)):
                t = planner.ask(study)
                t.set_user_attr("plan_id", pid)
                batch.append((t.number, dict(t.params)))
        members = [m for n, params in batch for m in planner.trial_members("search", n, params, sa.search_seeds)]
        asked = sum(1 for t in study.get_trials(deepcopy=False)
                    if t.state not in (TrialState.FAIL, TrialState.WAITING))
        session.later_runs = (max(0, sa.num_samples - asked) * len(sa.search_seeds)
                              + _after_rounds(sa))  # the search's ETA counts what follows
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


def _after_rounds(sa: SearchArgs) -> int:
    """The runs after the TPE rounds: the finalists on their seeds, then the confirmation (the
    winner and the baseline)."""
    return sa.finalists * len(sa.finalist_seeds) + 2 * len(sa.confirm_seeds)


def _live(study, number: int):
    """The RUNNING trial ``number`` as an ``optuna.trial.Trial`` (to set attributes, report, tell),
    also when it was asked by an earlier, interrupted driver of this plan."""
    import optuna

    (frozen,) = [t for t in study.get_trials(deepcopy=False) if t.number == number]
    return optuna.trial.Trial(study, frozen._trial_id)


def pick_finalists(study, planned: int) -> tuple[list, str]:
    """The ``planned`` best configurations that completed their round, best first, and when
    fewer completed, why there are fewer: a configuration pruned by successive halving (or
    failed) has no full-length score, so it is not eligible."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    finalists = sorted(done, key=lambda t: -t.value)[:planned]
    if len(finalists) >= planned:
        return finalists, ""
    pruned = sum(t.state == TrialState.PRUNED for t in trials)
    failed = sum(t.state == TrialState.FAIL for t in trials)
    why = [f"{pruned} pruned by successive halving" if pruned else "",
           f"{failed} failed" if failed else ""]
    others = " and ".join(w for w in why if w)
    return finalists, (f"{len(finalists)} finalists, not the {planned} planned: only "
                       f"{len(done)} configurations completed their round"
                       + (f" ({others})" if others else "")
                       + "; a pruned or failed configuration has no full-length score, so it is "
                       "not eligible (--no-halving trains every configuration to the end)")


def finish(session, study, planner: Planner, sa: SearchArgs, pid: str, spec: dict[str, Any]) -> int:
    from optuna.trial import TrialState

    from orchestrator.results import search_report

    done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if len(done) < 2:  # the session ends the parent FAILED with this reason
        raise ValueError(f"only {len(done)} configuration(s) finished the search; a search needs 2 "
                         "to compare (see the failed runs in MLflow)")
    finalists, short = pick_finalists(study, sa.finalists)
    members = [m for t in finalists for m in planner.trial_members("final", t.number, t.params, sa.finalist_seeds)]
    print(f"finalists: trials {[t.number for t in finalists]} on seeds {list(sa.finalist_seeds)}", flush=True)
    if short:
        print(f"note: {short}", file=sys.stderr, flush=True)
    session.later_runs = 2 * len(sa.confirm_seeds)
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
    session.later_runs = 0
    out = session.run(confirm, f"{planner.space.name}-{pid}-confirm")
    if out.interrupted:
        return session.interrupted()
    lead, extra_md = search_report.write(session, study, planner, finalists, seed_values, verdict, pid)
    return session.finish(spec, extra_md=extra_md, lead_md=lead)
