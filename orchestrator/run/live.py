"""The live view in the terminal: a status line for the whole campaign at least every
``LINE_S`` seconds, and one line per array evaluation and per run that ends.

A status line counts member-steps (one optimiser step of one run: an array of 10 runs at step 30
has done 300), so arrays of any size add up to one figure for the campaign::

    [1m05s] 340/1200 member-steps (28%), 5.2/s | runs: 0 done, 20 training, 0 queued | ETA 2m45s

The rate is the campaign's member-steps per second from its first progress report to its latest,
and the ETA is what was left at that report, at that rate, less the time since: one ETA for the
campaign, which falls by exactly the time between two lines until the next report. A search runs
several campaigns (rounds, finalists, confirmation) under one view: each is told the runs that
come after it (``later_runs``, priced at this campaign's steps per run), the search's start and
what the earlier ones did (``Prior``), so its clock, its steps and its ETA are the search's.
Steps come from the arrays' progress reports (rank 0 of each array, every
``trainables.arrays.trainer.PROGRESS_S`` seconds) and their evaluations; an array that has not
started yet counts the steps per run of those that have.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ray.tune import Callback

from orchestrator.spec.plan import ArrayPlan
from orchestrator.tracking.events import ONE_BY_ONE, PRUNED, Console, failure_kind

LINE_S = 20.0
"""at most this long between two status lines while anything trains"""


def _clock(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


@dataclass
class ArrayProgress:
    """Where one array stands: its step, its members still training, the steps of those that
    left (finished, pruned, failed)."""

    total_steps: int
    step: int = 0
    alive: int = 0
    left_steps: int = 0
    """member-steps of the members that left the array: each counts the steps it trained"""
    evaluating: str | None = None
    """the final evaluation under way once the steps are done ("transfer SST2 (5/7)")"""

    @property
    def done(self) -> int:
        return self.step * self.alive + self.left_steps

    @property
    def total(self) -> int:
        return self.total_steps * self.alive + self.left_steps


@dataclass
class Prior:
    """What the earlier campaigns of one search did: their start, member-steps and training time
    (from each one's first progress report to its last)."""

    t0: float
    done: int = 0
    steps: int = 0
    seconds: float = 0.0

    def add(self, view: LiveView) -> None:
        self.done += view.member_steps()[0]
        if view.first is not None and view.mark is not None:
            self.steps += view.mark[1] - view.first[1]
            self.seconds += view.mark[0] - view.first[0]


class LiveView(Callback):
    def __init__(self, arrays: Sequence[ArrayPlan], clock: Callable[[], float] = time.monotonic,
                 out: Callable[[str], None] | None = None, later_runs: int = 0,
                 prior: Prior | None = None, console: Console | None = None):
        self.plans = list(arrays)
        self.clock = clock
        self.out = out or (lambda line: print(line, flush=True))
        self.console = console or Console()
        """the members' events (pruned, stopped by the filter, NaN, one by one): the first of a
        kind is a line, the rest a count in the status line (``tracking/events.py``)"""
        self.later_runs = later_runs
        self.prior = prior or Prior(clock())
        self.t0 = self.prior.t0
        self.total_runs = sum(len(t.members) for t in arrays)
        self.ended: set[str] = set()
        self.failed: set[str] = set()
        self.arrays: dict[str, ArrayProgress] = {}
        """plan name -> progress, once the array has reported"""
        self.first: tuple[float, int] | None = None
        """(time, member-steps done) at the first report: the rate counts from there"""
        self.mark: tuple[float, int] | None = None
        """(time, member-steps done) at the latest report: the rate counts to there"""
        self.last_line: float | None = None
        self.trials: list = []

    # --- the figures -----------------------------------------------------------------------
    def member_steps(self) -> tuple[int, int | None]:
        """(done, total) member-steps of the campaign; total None until an array reports."""
        done = sum(a.done for a in self.arrays.values())
        started = sum(a.total for a in self.arrays.values())
        if not self.arrays:
            return done, None
        runs = sum(len(t.members) for t in self.plans if t.name in self.arrays)
        per_run = sum(a.total_steps * (len(p.members)) for p in self.plans
                      if (a := self.arrays.get(p.name))) / max(1, runs)
        unseen = sum(len(t.members) for t in self.plans if t.name not in self.arrays)
        return done, started + round((unseen + self.later_runs) * per_run)

    def counts(self, trials) -> tuple[int, int, int]:
        """(ended, training, queued) runs: ended ones (finished, pruned or failed), those of
        running trials, the rest."""
        running = queued = 0
        for t in trials:
            plan: ArrayPlan = self.plans[t.config["index"]]
            left = sum(1 for m in plan.members if m.key not in self.ended)
            if t.status == "RUNNING":
                running += left
            elif t.status == "PENDING":
                queued += left
        return len(self.ended), running, queued

    def status(self, trials) -> str:
        now = self.clock()
        done, total = self.member_steps()
        before = self.prior.done
        done, total = done + before, None if total is None else total + before
        ended, run, queued = self.counts(trials)
        failed = f", {len(self.failed)} failed" if self.failed else ""
        runs = f"runs: {ended - len(self.failed)} done{failed}, {run} training, {queued} queued"
        runs += f" ({self.console.counts().lstrip(', ')})" if self.console.counts() else ""
        head = f"[{_clock(now - self.t0)}]"
        if total is None:
            return (f"{head} {len(self.plans)} array{'s' * (len(self.plans) != 1)} "
                    f"({self.total_runs} runs) starting | {runs} | ETA -")
        share = f"{done / total:.0%}" if total else "-"
        rate, eta = None, "ETA -"
        if self.first is not None and self.mark is not None:
            steps = self.mark[1] - self.first[1] + self.prior.steps
            seconds = self.mark[0] - self.first[0] + self.prior.seconds
            if steps > 0 and seconds > 0:
                rate = steps / seconds
                left = total - done
                eta = (f"ETA {_clock(left / rate - (now - self.mark[0]))}" if left > 0 else
                       self._final_evaluations() if run + queued else "ETA -")
        speed = f"{rate:.1f}/s" if rate is not None else "-/s"
        return f"{head} {done}/{total} member-steps ({share}), {speed} | {runs} | {eta}"

    def _final_evaluations(self) -> str:
        """'ETA: final evaluations', with what each array that said so is evaluating."""
        doing = [f"{p.label}: {a.evaluating}" for p in self.plans
                 if (a := self.arrays.get(p.name)) is not None and a.evaluating
                 and any(m.key not in self.ended for m in p.members)]
        return "ETA: final evaluations" + (f" ({'; '.join(doing)})" if doing else "")

    def line(self, trials, *events: str) -> None:
        self.out("\n".join([self.status(trials), *events]))
        self.last_line = self.clock()

    # --- Tune callbacks --------------------------------------------------------------------
    def on_step_begin(self, iteration, trials, **info):
        self.trials = trials
        if self.last_line is None or (self.clock() - self.last_line >= LINE_S and any(
                t.status in ("RUNNING", "PENDING") for t in trials)):
            self.line(trials)

    def _progress(self, plan: ArrayPlan, result) -> ArrayProgress | None:
        if "total_steps" not in result:
            return None
        a = self.arrays.get(plan.name)
        if a is None:
            left = sum(1 for m in plan.members if m.key not in self.ended)
            a = self.arrays[plan.name] = ArrayProgress(int(result["total_steps"]), alive=left)
        a.step = max(a.step, int(result.get("step", 0)))
        if result.get("evaluating"):
            a.evaluating = str(result["evaluating"])
        self.mark = (self.clock(), self.member_steps()[0])
        if self.first is None:
            self.first = self.mark
        return a

    def _leave(self, plan: ArrayPlan, key: str, step: int) -> None:
        self.ended.add(key)
        a = self.arrays.get(plan.name)
        if a is not None and a.alive > 0:
            a.alive -= 1
            a.left_steps += step

    def on_trial_result(self, iteration, trials, trial, result, **info):
        plan: ArrayPlan = self.plans[trial.config["index"]]
        a = self._progress(plan, result)
        labels = {m.key: m.label for m in plan.members}
        entries = result.get("members", [])
        step = int(result.get("step", 0))
        events = []
        alive = [e for e in entries if "stsb_dev" in e and not result.get("final")]
        if alive:
            devs = [e["stsb_dev"] for e in alive]
            span = f"{devs[0]:.2f}" if len(devs) == 1 else f"{min(devs):.2f}-{max(devs):.2f}"
            events.append(f"  {plan.label}: step {step}/{result.get('total_steps', '?')}, "
                          f"STS-B dev {span}")
        for method, why in (result.get("one_by_one") or {}).items():
            self.console.event(f"{ONE_BY_ONE}:{method}", f"  note: method {method}: one by one: "
                               f"{why} (its runs are tagged mmemb.batched=false; the same "
                               "numbers, slower)", events.append)
        for e in entries:
            key = e.get("key")
            if key not in labels or key in self.ended:
                continue
            if e.get("failed"):
                self.failed.add(key)
                self._leave(plan, key, step)
                line = f"  FAILED {labels[key]}: {e.get('error')}"
                kind = failure_kind(e.get("error"))
                if kind is None:
                    events.append(line)
                else:  # the first of its kind said whole, later ones counted
                    self.console.event(kind, f"{line} (later runs stopped so are counted in the "
                                       "status line; the report lists them)", events.append)
            elif e.get("pruned"):
                self._leave(plan, key, int(e.get("step", step)))
                self.console.event(PRUNED, f"  pruned {labels[key]} at step {e.get('step', step)} "
                                   "by successive halving (later pruned runs are counted in the "
                                   "status line; the report lists them)", events.append)
            elif result.get("final"):
                self._leave(plan, key, a.total_steps if a else step)
                events.append(f"  done {labels[key]}: avg {e.get('test/avg', float('nan')):.2f} "
                              f"(best STS-B dev {e.get('best_stsb_dev', float('nan')):.2f})")
        if events:
            self.line(trials, *events)

    def on_trial_error(self, iteration, trials, trial, **info):
        from orchestrator.tracking.mirror import trial_error

        plan: ArrayPlan = self.plans[trial.config["index"]]
        left = [m for m in plan.members if m.key not in self.ended]
        a = self.arrays.get(plan.name)
        for m in left:
            self.failed.add(m.key)
            self._leave(plan, m.key, a.step if a else 0)
        if left:
            self.line(trials, f"  FAILED {plan.label}: {trial_error(trial)}")
