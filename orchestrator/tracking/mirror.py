"""A Tune callback that mirrors every member of every array into its own MLflow child run.

All MLflow writes happen here, in the driver (trial processes never open the store, so a sqlite
store has one writer), and go through an ``Journal`` that keeps them on disk if MLflow stops
answering. Each report of an array carries ``members``: one entry per member, which lands in that
member's child run: dev curve and loss terms at their step, and on the last report the test
scores, the checkpoint of its best weights, and FINISHED; a member that left the array (a NaN
loss) ends FAILED with its step and term; one pruned by a search's successive halving ends
FINISHED with an ``mmemb.stopped`` tag.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ray.tune import Callback

from orchestrator.spec.plan import ArrayPlan, RunPlan
from orchestrator.tracking.client import TAG
from orchestrator.tracking.events import (
    BATCHED,
    BATCHED_REASON,
    FILTER,
    NAN,
    ONE_BY_ONE,
    PRUNED,
    failure_kind,
    ignored_settings,
    resolved_run,
    tag,
)
from orchestrator.tracking.journal import Journal


def member_record(m: RunPlan, trial: ArrayPlan,
                  one_by_one: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What MLflow records of a member at its start (plain JSON: the offline journal keeps it):
    its params are the settings its method reads, resolved (``events.resolved_run``), the rest
    named in a tag; ``one_by_one``: method -> why its heads and loss cannot run batched (the
    pre-start check's verdict)."""
    run, unread = resolved_run(m.run)
    ignored = ignored_settings(m)
    method = m.run.objective.method
    return {"key": m.key, "cell": m.cell, "seed": m.seed, "run": run,
            "config_hash": m.config_hash, "run_name": m.run_name, "grid": trial.campaign,
            "array": trial.name, "group": m.group, "cell_label": m.cell_label or m.cell,
            "objective": m.run.objective.get_config_dict(),
            "backend": "looped" if trial.note else "stacked", "backend_note": trial.note,
            "unread": unread, "batched_reason": (one_by_one or {}).get(method),
            "ignored": "; ".join(f"{k} (from {layer}) is not read by method {method} at these "
                                 "settings" for k, layer in ignored.items())}


class MlflowMirror(Callback):
    def __init__(self, plans: Sequence[ArrayPlan], journal: Journal, parent_id: str,
                 reuse: Mapping[str, str] | None = None,
                 one_by_one: Mapping[str, str] | None = None):
        self.plans = list(plans)
        self.one_by_one = dict(one_by_one or {})
        """method -> why its members run one by one: the pre-start check's verdicts, and those
        an array reported while it trained"""
        self.tagged: set[str] = set()
        """members tagged as running one by one"""
        self.journal, self.parent = journal, parent_id
        self.reuse = dict(reuse or {})
        self.runs: dict[str, str] = {}
        self.ended: set[str] = set()
        self.finals: dict[str, dict[str, Any]] = {}
        """member key -> its last report entry (test scores), for members that finished"""
        self.failures: dict[str, str] = {}
        self.pruned: dict[str, int] = {}
        self.best_dev: dict[str, float] = {}
        """member key -> best STS-B dev so far (a pruned member's value in a search)"""
        self.reused: set[str] = set()
        self.logged_steps: dict[str, set[int]] = {}
        """member key -> dev-curve steps already in MLflow (this driver's, and for runs an
        interrupted driver left behind, what their history holds)"""
        self.history_read: set[str] = set()
        self.logged_at: dict[str, set[tuple[str, int]]] = {}
        """member key -> (metric, step) pairs this driver has logged"""

    def _child(self, trial_plan: ArrayPlan, m: RunPlan) -> str:
        if m.key not in self.runs:  # once per member, even across Tune retries
            old = self.reuse.pop(m.key, None)
            self.runs[m.key] = self.journal.start_child(
                self.parent, member_record(m, trial_plan, self.one_by_one), reuse=old)
            if m.run.objective.method in self.one_by_one:
                self.tagged.add(m.key)
            if old is not None:
                self.reused.add(m.key)
        return self.runs[m.key]

    def _already_logged(self, key: str, run: str, step: int) -> bool:
        """A resumed array (a Tune retry after a worker or node died, or --resume) re-sends the
        evaluation of its checkpoint: log it once."""
        if key in self.reused and key not in self.history_read and not run.startswith("pending:"):
            self.history_read.add(key)
            try:
                hist = self.journal.tracker.client.get_metric_history(run, "stsb_dev")
            except Exception:  # unreadable: log again rather than lose the point
                hist = []
            self.logged_steps.setdefault(key, set()).update(int(h.step) for h in hist)
        return step in self.logged_steps.get(key, set())

    def on_trial_start(self, iteration, trials, trial, **info):
        plan: ArrayPlan = self.plans[trial.config["index"]]
        for m in plan.members:
            self._child(plan, m)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        plan: ArrayPlan = self.plans[trial.config["index"]]
        by_key = {m.key: m for m in plan.members}
        self._one_by_one(plan, result.get("one_by_one") or {})
        for entry in result.get("members", []):
            key = entry.get("key")
            if key not in by_key or key in self.ended:
                continue
            run = self._child(plan, by_key[key])
            if entry.get("failed"):
                error = entry.get("error") or "failed"
                kind = failure_kind(error)
                if kind in (NAN, FILTER):
                    self.journal.set_tag(run, tag(kind), error[:5000])
                self._end(run, key, "FAILED", error=error)
                continue
            if "best_stsb_dev" in entry:
                self.best_dev[key] = float(entry["best_stsb_dev"])
            metrics = {**entry, "step": entry.get("step", result.get("step", 0))}
            if result.get("resumed") and self._already_logged(key, run, int(metrics["step"])):
                continue
            if "stsb_dev" in entry:
                self.logged_steps.setdefault(key, set()).add(int(metrics["step"]))
            if result.get("final"):
                metrics["final"] = 1
            self.journal.log_result(run, self._once(key, metrics))
            if entry.get("pruned"):
                self.pruned[key] = int(entry["step"])
                why = f"pruned by successive halving at step {entry['step']}"
                self.journal.set_tag(run, f"{TAG}stopped", why)
                self.journal.set_tag(run, tag(PRUNED), why)
                self._end(run, key, "FINISHED")
            elif result.get("final"):
                if result.get("checkpoint_path") and entry.get("model"):
                    self._model(run, plan, Path(result["checkpoint_path"]) / entry["model"])
                if result.get("node_id"):
                    self.journal.set_tag(run, f"{TAG}node", str(result["node_id"]))
                self.finals[key] = entry
                self._end(run, key, "FINISHED")

    def _one_by_one(self, plan: ArrayPlan, looped: Mapping[str, str]) -> None:
        """An array whose method vmap could not run (its report's ``one_by_one``: method ->
        why): its members of that method, and the parent, say so."""
        for method, why in looped.items():
            if method not in self.one_by_one:
                self.one_by_one[method] = why
                self.journal.set_tag(self.parent, BATCHED, "false")
                self.journal.set_tag(self.parent, BATCHED_REASON, f"{method}: {why}"[:5000])
            for m in plan.members:
                if m.run.objective.method == method and m.key not in self.tagged:
                    self.tagged.add(m.key)
                    run = self._child(plan, m)
                    self.journal.set_tag(run, BATCHED, "false")
                    self.journal.set_tag(run, BATCHED_REASON, why[:5000])
                    self.journal.set_tag(run, tag(ONE_BY_ONE), f"method {method}: {why}"[:5000])

    def _once(self, key: str, metrics: dict[str, Any]) -> dict[str, Any]:
        """Each metric once per step: the final report repeats best_stsb_dev and best_step,
        which the last evaluation, at the same step, has logged already."""
        step = int(metrics["step"])
        seen = self.logged_at.setdefault(key, set())
        fresh = {k: v for k, v in metrics.items() if k == "step" or (k, step) not in seen}
        seen.update((k, step) for k in metrics)
        return fresh

    def _model(self, run: str, plan: ArrayPlan, folder: Path) -> None:
        """The member's best student into MLflow as a model; once it is there, Ray's copy goes
        (unless --keep-checkpoints): the store is where users find models, and one copy is enough."""
        if "://" in plan.storage and not folder.is_dir():  # object storage: fetch it first
            self._remote_model(run, plan, folder)
            return
        if "://" in str(folder) or not folder.is_dir():  # nothing to read here: point at it
            self.journal.set_tag(run, f"{TAG}checkpoint", str(folder))
            return
        drop = not plan.keep_checkpoints  # Ray's copy goes once MLflow has the model
        if self.journal.log_model(run, str(folder), move=drop) and drop:
            shutil.rmtree(folder.parent, ignore_errors=True)

    def _remote_model(self, run: str, plan: ArrayPlan, folder: Path) -> None:
        """The student from ``--storage s3://...``: copied beside the journal (which keeps the
        copy if MLflow cannot take it now), logged, then both copies go."""
        from orchestrator.tracking import remote_student

        where = remote_student.scheme_uri(plan.storage, folder.as_posix())
        local = self.journal.path.parent / "students" / run / folder.name
        try:
            remote_student.fetch(plan.storage, folder.as_posix(), local)
        except Exception as e:  # unreadable now: say where it is, lose nothing
            self.journal.set_tag(run, f"{TAG}checkpoint", where)
            print(f"warning: could not copy the student of run {run} from {where} "
                  f"({' '.join(str(e).split())[:200]}); it stays there", file=sys.stderr,
                  flush=True)
            return
        if self.journal.log_model(run, str(local), move=True):  # this copy is ours alone
            shutil.rmtree(local.parent, ignore_errors=True)
            with contextlib.suppress(OSError):  # the last one leaves no empty folder behind
                local.parent.parent.rmdir()
            if not plan.keep_checkpoints:
                remote_student.drop(plan.storage, folder.parent.as_posix())

    def on_trial_complete(self, iteration, trials, trial, **info):
        plan: ArrayPlan = self.plans[trial.config["index"]]
        for m in plan.members:  # a report the driver never saw: not silently a success
            if m.key not in self.ended:
                self._end(self._child(plan, m), m.key, "FAILED",
                          error="the run ended without reporting this member's final scores")

    def on_trial_error(self, iteration, trials, trial, **info):
        plan: ArrayPlan = self.plans[trial.config["index"]]
        reason = trial_error(trial)
        for m in plan.members:
            if m.key not in self.ended:
                self._end(self._child(plan, m), m.key, "FAILED", error=reason)

    def _end(self, run: str, key: str, status: str, error: str | None = None) -> None:
        if error is not None:
            self.journal.set_tag(run, f"{TAG}error", error)
            self.failures[key] = error
        self.journal.end(run, status)
        self.ended.add(key)


def trial_error(trial) -> str:
    """The one-line reason of a failed trial, from Tune's error file."""
    from trainables.runtime.ray_env import root_cause

    path = getattr(trial, "error_file", None) or ""
    try:
        text = Path(path).read_text() if path else ""
    except OSError:
        text = ""
    if "TrialFailed: " in text:  # our own one-line reason, inside Tune's traceback
        return text.split("TrialFailed: ", 1)[1].splitlines()[0].strip()[:500]
    return root_cause(RuntimeError(text)) if text else "trial failed (see the Ray logs)"
