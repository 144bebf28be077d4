"""Runs a list of planned trials on Ray Tune, each trial one Ray Train run, logged to MLflow.

Train V2 (Ray 2.60): a Tune trial is a light *driver* function that launches a TorchTrainer and
forwards its reports with ``TuneReportCallback``; the trial holds no CPU and the Train workers
hold the real CPUs/GPUs. Tune cannot see the workers' needs, so concurrency is capped from the
cluster's resources (``max_concurrent``): that is what packs ``--gpus-per-trial 0.25`` runs four
to a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.outbox import Outbox
from orchestrator.placement import Reaper, free_placement_groups

TRIAL_DRIVER_RESOURCES = {"CPU": 0, "memory": 1}
"""What each Tune trial's driver holds: nothing that counts. A driver that held CPU (even 0.01)
would let waiting drivers eat into the CPUs their own runs need: on a 1-CPU node that lost a
neighbour, two drivers plus a 1-CPU run no longer fit, and the table deadlocks. Tune refuses an
empty request, hence the one byte of memory."""


@dataclass(frozen=True)
class Resources:
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_concurrent: int | None = None

    def concurrency(self, cluster: Mapping[str, float]) -> int:
        """How many trials fit at once; raises when not even one fits."""
        cpus, gpus = cluster.get("CPU", 0.0), cluster.get("GPU", 0.0)
        if self.gpus_per_trial > gpus + 1e-9:
            raise ValueError(
                f"--gpus-per-trial {self.gpus_per_trial} but the cluster has {gpus:g} GPUs; "
                "lower it, use 0 for CPU runs, or join a GPU cluster with --address"
            )
        if self.cpus_per_trial > cpus + 1e-9:
            raise ValueError(
                f"--cpus-per-trial {self.cpus_per_trial} but the cluster has {cpus:g} CPUs; lower it"
            )
        fit = math.floor((cpus + 1e-9) / self.cpus_per_trial)
        if self.gpus_per_trial > 0:
            fit = min(fit, math.floor((gpus + 1e-9) / self.gpus_per_trial))
        return max(1, min(fit, self.max_concurrent or fit))


def trial_plan(cfg, grid: str, cell: str, storage: str, cpus: float, gpus: float,
               max_failures: int, key: str | None = None, run_name: str | None = None,
               label: str | None = None) -> dict[str, Any]:
    """The plan of one trial, as tables and searches both hand it to ``trial_fn`` (plain data:
    Tune stores it in the experiment state, MLflow gets its fields as tags). ``label`` names the
    trial in the live view."""
    h = cfg.config_hash()
    return {"key": key or f"{cell}/{h}", "grid": grid, "cell": cell, "seed": cfg.seed,
            "label": label or f"{cell} seed {cfg.seed}",
            "run": cfg.to_dict(), "config_hash": h, "run_name": run_name or f"{cell} {h}",
            # Stable per (grid, config): a resumed trial finds its Train run's checkpoints.
            "train_name": f"{grid}-{h}", "storage": storage, "max_failures": max_failures,
            "cpus": cpus, "gpus": gpus}


def trial_fn(config: dict[str, Any]) -> None:
    """One Tune trial: launch the run's TorchTrainer and fail the trial when the run fails."""
    import ray
    from ray.tune.integration.ray_train import TuneReportCallback

    from trainables.config import RunConfig
    from trainables.train import root_cause, run_torch_trainer

    plan = config["trial"]
    cfg = RunConfig.from_dict(plan["run"])
    # The name is stable per (trial, config): after a driver kill, --resume relaunches the same
    # Train run, which continues from its own latest checkpoint instead of starting over.
    try:
        run_torch_trainer(
            cfg, plan["train_name"], plan["storage"], callbacks=[TuneReportCallback()],
            max_failures=plan["max_failures"], cpus=plan["cpus"], gpus=plan["gpus"],
            owner=ray.get_runtime_context().get_actor_id(),
        )
    except Exception as e:  # the one-line reason reaches Tune's error file and MLflow
        raise TrialFailed(root_cause(e)) from None
    _forward_pending_reports()


def _forward_pending_reports() -> None:
    """Hand Tune the reports still waiting in TuneReportCallback's queue.

    The run's last report (the test scores) can still sit in that queue when fit() returns, and
    Tune ends the trial without reading it: a finished run then shows up as a missing seed.
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


class TrialFailed(RuntimeError):
    """A run failed; the message is its root cause (NonFiniteLoss, OutOfMemoryError, ...)."""


def make_callback(outbox: Outbox, parent_id: str, reuse: Mapping[str, str] | None = None,
                  verbose: bool = True, total: int | None = None):
    """A Tune callback that mirrors every trial into a child MLflow run, from the driver.

    ``reuse`` maps trial keys to child runs left unfinished by an earlier, interrupted driver:
    a resumed trial continues in its old run instead of adding a duplicate. Writes go through
    ``outbox``, which keeps them on disk if MLflow stops answering.
    """
    from ray.tune import Callback

    reuse = dict(reuse or {})

    class MlflowTrials(Callback):
        def __init__(self) -> None:
            self.runs: dict[str, str] = {}
            self.groups: dict[str, set[str]] = {}
            self.reap = Reaper()

        def _run(self, trial) -> str:
            if trial.trial_id not in self.runs:  # once per trial, even across Tune retries
                plan = trial.config["trial"]
                self.runs[trial.trial_id] = outbox.start_child(
                    parent_id, plan, reuse=reuse.pop(plan["key"], None))
            return self.runs[trial.trial_id]

        def on_trial_start(self, iteration, trials, trial, **info):
            self._run(trial)

        def on_step_end(self, iteration, trials, **info):
            # Runs whose controller died (a trial stopped by ASHA, a node that left) keep their
            # placement groups; unreleased, they starve every later trial. Freeing a stopped
            # trial's group directly would race its dying controller into asking for a new one.
            if self.reap() and verbose:
                print(f"  released placement groups of stopped or lost runs ({self.reap.freed} "
                      "so far)", flush=True)

        def on_trial_result(self, iteration, trials, trial, result, **info):
            if result.get("placement_group"):
                self.groups.setdefault(trial.trial_id, set()).add(result["placement_group"])
            outbox.log_result(self._run(trial), result)
            if not verbose:
                return
            name = trial.config["trial"]["label"]
            states = [x.status for x in trials]
            n = total or len(states)
            done, failed = states.count("TERMINATED"), states.count("ERROR")
            live = (f"[{done + failed}/{n} finished, {states.count('RUNNING')} running"
                    + (f", {failed} failed]" if failed else "]"))
            if result.get("final"):
                print(f"{live} done {name}: "
                      f"avg {result.get('test/avg', float('nan')):.2f}  "
                      f"(best STS-B dev {result.get('best_stsb_dev', float('nan')):.2f})", flush=True)
            elif "stsb_dev" in result:
                print(f"{live} {name}: step {result.get('step')}  "
                      f"STS-B dev {result['stsb_dev']:.2f}", flush=True)

        def on_trial_complete(self, iteration, trials, trial, **info):
            groups = self.groups.pop(trial.trial_id, ())
            run = self._run(trial)
            last = trial.last_result or {}
            if last.get("final"):  # the run ended itself; its controller is done with the group
                free_placement_groups(groups)
            else:  # stopped by the scheduler (ASHA): the reaper frees its group
                step = last.get("step", 0)
                outbox.set_tag(run, "mmemb.stopped", f"stopped early at step {step}")
                if verbose:
                    name = trial.config["trial"]["label"]
                    print(f"  stopped {name} at step {step} (below the others' STS-B dev)",
                          flush=True)
            outbox.end(run, "FINISHED")

        def on_trial_error(self, iteration, trials, trial, **info):
            free_placement_groups(self.groups.pop(trial.trial_id, ()))
            run = self._run(trial)
            reason = _trial_error(trial)
            outbox.set_tag(run, "mmemb.error", reason)
            outbox.end(run, "FAILED")
            print(f"  FAILED {trial.config['trial']['label']}: {reason}", flush=True)

    return MlflowTrials()


def _trial_error(trial) -> str:
    from trainables.train import root_cause

    path = getattr(trial, "error_file", None) or ""
    try:
        text = Path(path).read_text() if path else ""
    except OSError:
        text = ""
    if "TrialFailed: " in text:  # our own one-line reason, inside Tune's traceback
        return text.split("TrialFailed: ", 1)[1].splitlines()[0].strip()[:500]
    return root_cause(RuntimeError(text)) if text else "trial failed (see the Ray logs)"


def wait_for_resources(resources: Resources, address: str | None, timeout_s: float) -> None:
    """On an autoscaling cluster, ask for the GPUs the first trials need and wait for them.

    A fresh ``ray up`` cluster has no GPU workers yet; asking the autoscaler up front lets
    ``concurrency`` see them instead of refusing the run. Locally nothing can appear, so the
    caller's resource check fails at once with its message.
    """
    import time

    import ray

    if not address or resources.gpus_per_trial <= 0:
        return
    have = ray.cluster_resources().get("GPU", 0.0)
    if have >= resources.gpus_per_trial:
        return
    from ray.autoscaler.sdk import request_resources

    n = resources.max_concurrent or 1
    request_resources(bundles=[{"CPU": resources.cpus_per_trial,
                                "GPU": resources.gpus_per_trial}] * n)
    print(f"waiting up to {timeout_s:.0f}s for GPU workers to join "
          f"({n} x {resources.gpus_per_trial:g} GPU requested)...", flush=True)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if ray.cluster_resources().get("GPU", 0.0) >= resources.gpus_per_trial:
            return
        time.sleep(10)


def run_trials(plans: Sequence[dict[str, Any]], name: str, storage: str, resources: Resources,
               callbacks: list, max_failures: int = 0) -> Any:
    """Run planned trials (dicts from the planner) as one Tune experiment; returns the ResultGrid."""
    import ray
    from ray import tune

    concurrency = resources.concurrency(ray.cluster_resources())
    tuner = tune.Tuner(
        tune.with_resources(trial_fn, TRIAL_DRIVER_RESOURCES),
        param_space={"trial": tune.grid_search(list(plans))},
        tune_config=tune.TuneConfig(max_concurrent_trials=concurrency),
        run_config=tune.RunConfig(
            name=name, storage_path=storage, callbacks=callbacks, verbose=0,
            failure_config=tune.FailureConfig(max_failures=max_failures),
        ),
    )
    return tuner.fit()
