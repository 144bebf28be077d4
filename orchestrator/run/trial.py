"""One Tune trial: train its array and forward every report to Tune.

An array of one worker trains in the trial's own process (``trainables.runtime.in_trial``); one
of several workers is a Ray Train run the trial launches and waits for.

Why not Ray's ``TuneReportCallback``: its reports reach Tune through a queue that Tune's main
thread drains while the trial function runs. When the run returns, its last report (the test
scores) can still sit there: Tune then ends the trial without it, or, if anything else reports
from the training thread at that moment, both threads wait on each other for ever (seen under
load). Here the run goes in a helper thread and the trial's own thread is the only one
that calls ``tune.report``; it returns once the run has ended and the queue is empty. A Train
run's queue is a :class:`~orchestrator.run.report_channel.ReportChannel` (keys in the GCS), not
an actor; an array in the trial's process puts its reports on a plain queue.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ray.train.v2.api.callback import UserCallback

from orchestrator.run.launch import Launch
from orchestrator.run.resources import TRIAL_DRIVER_RESOURCES

_POLL_S = 0.5  # how often the forwarder looks whether the run has ended
_ENDED = object()  # put on a plain queue when its run has returned


class TrialFailed(RuntimeError):
    """A run failed; the message is its root cause (OutOfMemoryError, a worker's error, ...)."""


def one_worker(plan: Launch) -> bool:
    """Whether ``plan``'s array trains in its trial's own process (one worker), not through a
    Ray Train run (several, averaging their gradients)."""
    return int(plan.members[0][1].get("num_workers", 1)) == 1


def trial_resources(plan: Launch) -> dict[str, float]:
    """What the trial of ``plan`` holds: the array's CPUs/GPUs when it trains in the trial;
    nothing that counts when it launches a Train run, whose workers hold them
    (``resources.TRIAL_DRIVER_RESOURCES``)."""
    from trainables.train import uses_gpu

    if not one_worker(plan):
        return dict(TRIAL_DRIVER_RESOURCES)
    gpu = uses_gpu(plan.members[0][1], plan.gpus)
    return {"CPU": plan.cpus, **({"GPU": plan.gpus} if gpu else {})}


def trial_fn(config: dict[str, Any], arrays: Sequence[Launch]) -> None:
    """The Tune trainable: runs ``arrays[config["index"]]``.

    Tune sees only the index: its variant resolution walks and rewrites config values (a
    dataclass would not come out whole), so the arrays travel by ``tune.with_parameters``, as
    plain values (``launch.py``). An array of one worker trains here, in this process
    (``trainables.runtime.in_trial``); one of several launches a Ray Train run, and this
    process imports Ray, never torch.
    """
    import ray

    from trainables.runtime.ray_env import root_cause

    plan = arrays[config["index"]]
    runs = list(plan.members)

    if one_worker(plan):
        def run(reports: Any) -> Any:
            from trainables.train import loop_config, train_in_trial, uses_gpu

            gpus = plan.gpus if uses_gpu(runs[0][1], plan.gpus) else 0.0
            cfg = loop_config(runs, dict(plan.methods), plan.cpus, plan.keep_checkpoints,
                              plan.halving, dict(plan.groups))
            return train_in_trial(cfg, plan.storage, plan.name, gpus, reports)

        channel: Any = LocalReports()
    else:
        owner = ray.get_runtime_context().get_actor_id()

        def run(reports: Any) -> Any:
            from trainables.train import run_torch_trainer

            # The name is stable per member set: after a driver kill, --resume relaunches the
            # same Train run, which continues from its own latest checkpoint instead of starting
            # over. Rank 0's progress goes on the reports' queue, so it reaches Tune in order.
            return run_torch_trainer(
                runs, plan.name, plan.storage,
                callbacks=[QueueReports(reports)], max_failures=plan.max_failures,
                cpus=plan.cpus, gpus=plan.gpus, owner=owner,
                keep_checkpoints=plan.keep_checkpoints, halving=plan.halving,
                groups=dict(plan.groups), progress=reports, methods=dict(plan.methods),
            )

        channel = None  # the GCS's: the controller and rank 0 write from other processes
    try:
        forward_reports(run, channel=channel)
    except Exception as e:  # the one-line reason reaches Tune's error file and MLflow
        raise TrialFailed(root_cause(e)) from None


class LocalReports(queue.Queue):
    """The reports queue of an array that trains in the trial's process: a plain queue."""

    def shutdown(self, force: bool = True) -> None:
        """Nothing to remove (``ReportChannel.shutdown``'s signature)."""


def forward_reports(run: Callable[[Any], Any], report: Callable[[dict], None] | None = None,
                    poll_s: float = _POLL_S, channel: Any = None) -> Any:
    """Call ``run(channel)`` in a helper thread and pass each item it puts there to ``report``.

    ``report`` (default ``ray.tune.report``) is called from this thread only, in the order the
    run put them, and every item put before ``run`` returned is passed on before this
    returns. ``run``'s exception is raised here, after the reports that preceded it.
    ``channel`` defaults to a :class:`~orchestrator.run.report_channel.ReportChannel`, which
    other processes (Train's controller and workers) can write to.
    """
    from orchestrator.run.report_channel import Empty, ReportChannel

    if report is None:
        from ray import tune

        report = tune.report
    reports = ReportChannel() if channel is None else channel  # unbounded: the run never waits
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = run(reports)
        except BaseException as e:  # re-raised in the caller's thread
            outcome["error"] = e
        finally:
            if isinstance(reports, LocalReports):  # the end, read at once, not a poll later
                reports.put(_ENDED)

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
            if item is _ENDED:  # put after the run's last report: nothing follows it
                break
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
