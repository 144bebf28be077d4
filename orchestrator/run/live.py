"""The live view in the terminal: one line per array evaluation and per finished member, each
with the members' finished / running / queued counts, the elapsed time and an ETA."""

from __future__ import annotations

import time
from collections.abc import Sequence

from ray.tune import Callback

from orchestrator.spec.plan import ArrayPlan


def _clock(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class LiveView(Callback):
    def __init__(self, arrays: Sequence[ArrayPlan]):
        self.plans = list(arrays)
        self.t0 = time.monotonic()
        self.total = sum(len(t.members) for t in arrays)
        self.ended: set[str] = set()
        self.progress: dict[str, tuple[int, int, int]] = {}
        """trial name -> (step, total steps, members alive)"""

    def counts(self, trials) -> tuple[int, int, int]:
        """(finished, running, queued) members: ended ones, those of running trials, the rest."""
        running = queued = 0
        for t in trials:
            plan: ArrayPlan = self.plans[t.config["index"]]
            left = sum(1 for m in plan.members if m.key not in self.ended)
            if t.status == "RUNNING":
                running += left
            elif t.status == "PENDING":
                queued += left
        return len(self.ended), running, queued

    def eta(self) -> str:
        done = sum(s * n for s, _, n in self.progress.values())
        todo = sum((t - s) * n for s, t, n in self.progress.values())
        elapsed = time.monotonic() - self.t0
        if not done or not self.progress:
            return "ETA -"
        unseen = self.total - len(self.ended) - sum(n for _, _, n in self.progress.values())
        per_member = sum(t for _, t, _ in self.progress.values()) / len(self.progress)
        todo += max(0, unseen) * per_member
        return f"ETA {_clock(elapsed * todo / done)}"

    def status(self, trials) -> str:
        fin, run, queued = self.counts(trials)
        return (f"[{_clock(time.monotonic() - self.t0)} | {fin}/{self.total} done, {run} running, "
                f"{queued} queued | {self.eta()}]")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        plan: ArrayPlan = self.plans[trial.config["index"]]
        labels = {m.key: m.label for m in plan.members}
        entries = result.get("members", [])
        lines = []
        for e in entries:
            key = e.get("key")
            if key not in labels or key in self.ended:
                continue
            if e.get("failed"):
                self.ended.add(key)
                lines.append(f"  FAILED {labels[key]}: {e.get('error')}")
            elif e.get("pruned"):
                self.ended.add(key)
                lines.append(f"  pruned {labels[key]} at step {e['step']}")
            elif result.get("final"):
                self.ended.add(key)
                lines.append(f"  done {labels[key]}: avg {e.get('test/avg', float('nan')):.2f} "
                             f"(best STS-B dev {e.get('best_stsb_dev', float('nan')):.2f})")
        alive = [e for e in entries if "stsb_dev" in e and not result.get("final")]
        if "total_steps" in result:
            self.progress[plan.name] = (int(result["step"]), int(result["total_steps"]),
                                        len(alive) if alive else 0)
        if alive:
            devs = [e["stsb_dev"] for e in alive]
            span = f"{devs[0]:.2f}" if len(devs) == 1 else f"{min(devs):.2f}-{max(devs):.2f}"
            print(f"{self.status(trials)} {plan.label}: step {result['step']}/"
                     f"{result.get('total_steps', '?')}  STS-B dev {span}", flush=True)
        if lines:
            print(self.status(trials) + "\n" + "\n".join(lines), flush=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        from orchestrator.tracking.mirror import trial_error

        plan: ArrayPlan = self.plans[trial.config["index"]]
        left = [m for m in plan.members if m.key not in self.ended]
        self.ended.update(m.key for m in left)
        self.progress.pop(plan.name, None)
        if left:
            print(f"{self.status(trials)} FAILED {plan.label}: {trial_error(trial)}", flush=True)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.progress.pop(self.plans[trial.config["index"]].name, None)
