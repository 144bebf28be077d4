"""Which parent run a campaign continues: ``--resume`` finds it, or says in one line why not.

A campaign's parent run is found by its plan id (``orchestrator.spec.plan.plan_id``). With
``--resume``, the parent of the same plan is continued; failing that, a parent that ran a subset
of this plan (fewer cells or seeds) is extended; failing that, the refusal names what the store
holds instead and the flags that would resume or extend it. Without ``--resume`` nothing is
reused, and a note says when a parent of the same plan could have been. The real run
(``campaign.Session``) and the dry run's preview (``dry_run.resume_preview``) share this lookup.
An array a resume continues whose checkpoints are gone trains again from step 0, and says so
(``say_lost_checkpoints``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.spec.plan import ArrayPlan


@dataclass(frozen=True)
class Parent:
    """The parent run a ``--resume`` continues."""

    run_id: str
    extended: bool
    """a parent of a subset of this plan, which this plan extends"""
    run: Any
    """its MLflow run (its tags name the code that trained it)"""


def find_parent(tracker: Any, campaign: Any, resume: bool, quiet: bool = False) -> Parent | None:
    """With ``resume``: the parent of ``campaign`` (a ``campaign.Campaign``) in ``tracker``'s
    store, or one line saying what the store holds instead (nothing of this grid, or a plan that
    differs, and how). Without: None, with a note (unless ``quiet``) when a parent of the same
    plan could have been resumed."""
    from orchestrator.spec.plan import plan_difference, plan_union

    c = campaign
    found = tracker.find_parent(c.plan_id)
    if not resume:
        # A plain rerun trains anew under a new parent (the parent names the Train runs):
        # it never reports another table's results; --resume is the way to reuse them.
        if found is not None and not quiet:
            unfinished = found.info.status != "FINISHED"
            print(f"note: {'an unfinished' if unfinished else 'a finished'} {c.kind} of "
                  f"this plan is in the store (parent {found.info.run_id}, "
                  f"{found.info.status}); this trains every run anew under a new parent, "
                  f"--resume would {'continue' if unfinished else 'reuse'} it",
                  file=sys.stderr, flush=True)
        return None
    if found is not None:
        return Parent(found.info.run_id, False, found)
    grid = c.tags.get("mmemb.grid")
    subset = grid and tracker.parent_to_extend(
        c.kind, grid, c.plan_id, {m.key: m.config_hash for m in c.members})
    if subset:
        return Parent(subset, True, tracker.client.get_run(subset))
    tag = "mmemb.space" if c.kind == "search" else "mmemb.grid"
    latest = tracker.latest_parent(c.kind, tag, c.tags.get(tag, c.name))
    if latest is None:
        raise ValueError(f"--resume: nothing to resume: {tracker.uri} holds no {c.kind} "
                         f"of {c.name!r}; run without --resume to start it, or pass the "
                         "--tracking-uri the interrupted run used")
    what, fix = plan_difference(tracker.parent_summary(latest), c.summary)
    rid = latest.info.run_id
    done = len(tracker.finished_runs(rid))
    how = "; ".join(what) or "its plan id differs"
    again = (f"run with {' '.join(fix)} to resume it" if fix else
             "run the command it ran to resume it")
    union = plan_union(tracker.parent_summary(latest), c.summary)
    if union and union != fix:
        again += f", with {' '.join(union)} to extend it with this command's runs"
    raise ValueError(f"--resume: no {c.kind} of this plan in {tracker.uri}; the latest "
                     f"of {c.name!r} (parent {rid}, {latest.info.status}, {done} runs "
                     f"finished) has another plan: {how}. Nothing is retrained: {again}, or "
                     "drop --resume to start this plan anew")


def say_lost_checkpoints(tracker: Any, parent: str, storage: str,
                         arrays: Sequence[ArrayPlan]) -> None:
    """--resume of an array whose runs had trained (they logged a dev score, so a checkpoint
    was written) but whose checkpoints are gone from a local --storage: it starts again from
    step 0, and says so instead of retraining silently."""
    if "://" in storage:
        return
    results = tracker.member_results(parent)
    for t in arrays:
        started = [m.key for m in t.members
                   if "stsb_dev" in (results.get(m.key) or {}).get("metrics", {})]
        if started and not any((Path(storage) / t.name).glob("checkpoint_*")):
            print(f"note: --resume: the checkpoints of {t.label} are gone from "
                  f"{Path(storage) / t.name} (deleted, or another --storage); its "
                  f"{len(started)} started run(s) train again from step 0", file=sys.stderr,
                  flush=True)
