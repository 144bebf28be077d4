"""One Tune trial: launch its array's Ray Train run and forward every report to Tune.

Why not Ray's ``TuneReportCallback``: its reports reach Tune through a queue that Tune's main
thread drains while the trial function runs. When the run returns, its last report (the test
scores) can still sit there: Tune then ends the trial without it, or, if anything else reports
from the training thread at that moment, both threads wait on each other for ever (seen under
load). Here the Train run goes in a helper thread and the trial's own thread is the only one
that calls ``tune.report``; it returns once the run has ended and the queue is empty. The queue
is a :class:`~orchestrator.run.report_channel.ReportChannel` (keys in the GCS), not an actor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from ray.train.v2.api.callback import UserCallback

from orchestrator.run.launch import Launch

_POLL_S = 0.5  # how often the forwarder looks whether the run has ended


class TrialFailed(RuntimeError):
    """A run failed; the message is its root cause (OutOfMemoryError, a worker's error, ...)."""


def trial_fn(config: dict[str, Any], arrays: Sequence[Launch]) -> None:
    """The Tune trainable: runs ``arrays[config["index"]]``.

    Tune sees only the index: its variant resolution walks and rewrites config values (a
    dataclass would not come out whole), so the arrays travel by ``tune.with_parameters``, as
    plain values (``launch.py``): this process imports Ray, never torch.
    """
    import ray

    from trainables.runtime.ray_env import root_cause
    from trainables.train import run_torch_trainer

    plan = arrays[config["index"]]
    owner = ray.get_runtime_context().get_actor_id()

    def run(callbacks: list) -> Any:
        # The name is stable per member set: after a driver kill, --resume relaunches the same
        # Train run, which continues from its own latest checkpoint instead of starting over.
        # Rank 0's progress goes on the reports' queue, so it reaches Tune in the same order.
        queue = next((c.queue for c in callbacks if isinstance(c, QueueReports)), None)
        return run_torch_trainer(
            list(plan.members), plan.name, plan.storage,
            callbacks=callbacks, max_failures=plan.max_failures, cpus=plan.cpus,
            gpus=plan.gpus, owner=owner, keep_checkpoints=plan.keep_checkpoints,
            halving=plan.halving, groups=dict(plan.groups), progress=queue,
            methods=dict(plan.methods),
        )

    try:
        forward_reports(run)
    except Exception as e:  # the one-line reason reaches Tune's error file and MLflow
        raise TrialFailed(root_cause(e)) from None


def forward_reports(run: Callable[[list], Any], report: Callable[[dict], None] | None = None,
                    poll_s: float = _POLL_S) -> Any:
    """Call ``run(callbacks)`` in a helper thread and pass each Train report to ``report``.

    ``report`` (default ``ray.tune.report``) is called from this thread only, in the order the
    run reported, and every report made before ``run`` returned is passed on before this
    returns. ``run``'s exception is raised here, after the reports that preceded it.
    """
    from orchestrator.run.report_channel import Empty, ReportChannel

    if report is None:
        from ray import tune

        report = tune.report
    reports = ReportChannel()  # unbounded: the run never waits
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = run([QueueReports(reports)])
        except BaseException as e:  # re-raised in the caller's thread
            outcome["error"] = e

    worker = threading.Thread(target=target, name="train-run", daemon=True)
    worker.start()
    try:
        while True:
            # Read before the wait: a run that had ended then has put all its reports, so an
            # empty queue afterwards means there is nothing left to pass on.
            ended = not worker.is_alive()
            try:
                item = reports.get(block=True, timeout=poll_s)
            except Empty:
                if ended:
                    break
                continue
            report(item)
    finally:
        reports.shutdown(force=True)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


class QueueReports(UserCallback):
    """Train callback (it runs in Train's controller): put each report on the trial's channel.

    Each item is rank 0's metrics plus ``checkpoint_path`` when the report has a checkpoint,
    the same item Ray's ``TuneReportCallback`` passes on.
    """

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]],
                     checkpoint: Any) -> None:
        item = dict(metrics[0])
        if checkpoint:
            item["checkpoint_path"] = checkpoint.path
        self.queue.put(item)  # returns once the queue holds it: the run ends after its reports
