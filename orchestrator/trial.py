"""One Tune trial: launch its array's Ray Train run and forward every report to Tune."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.plan import TrialPlan


class TrialFailed(RuntimeError):
    """A run failed; the message is its root cause (OutOfMemoryError, a worker's error, ...)."""


def trial_fn(config: dict[str, Any], trials: Sequence[TrialPlan]) -> None:
    """The Tune trainable: runs ``trials[config["index"]]``.

    Tune sees only the index: its variant resolution walks and rewrites config values (a
    dataclass would not come out whole), so the plans travel by ``tune.with_parameters``.
    """
    import ray
    from ray.tune.integration.ray_train import TuneReportCallback

    from trainables.ray_env import root_cause
    from trainables.train import run_torch_trainer

    plan = trials[config["index"]]
    # The name is stable per member set: after a driver kill, --resume relaunches the same Train
    # run, which continues from its own latest checkpoint instead of starting over.
    try:
        run_torch_trainer(
            [(m.key, m.run) for m in plan.members], plan.name, plan.storage,
            callbacks=[TuneReportCallback()], max_failures=plan.max_failures, cpus=plan.cpus,
            gpus=plan.gpus, owner=ray.get_runtime_context().get_actor_id(),
            keep_checkpoints=plan.keep_checkpoints, halving=plan.halving,
            groups={m.key: m.group for m in plan.members if m.group},
        )
    except Exception as e:  # the one-line reason reaches Tune's error file and MLflow
        raise TrialFailed(root_cause(e)) from None
    _forward_pending_reports()


def _forward_pending_reports() -> None:
    """Hand Tune the reports still waiting in TuneReportCallback's queue.

    The run's last report (the test scores) can still sit in that queue when fit() returns, and
    Tune ends the trial without reading it: finished members would then show up as missing.
    """
    from ray import tune
    from ray.train._internal.session import get_session

    try:
        q = get_session()._get_or_create_inter_actor_queue()
    except Exception:  # another Ray version: nothing to drain
        return
    while True:
        try:
            item = q.get(block=False)
        except Exception:  # Empty, or the queue actor is gone
            return
        if item:
            tune.report(item)
