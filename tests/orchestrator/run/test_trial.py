from __future__ import annotations

from types import SimpleNamespace

import pytest


def _burst(n: int, i: int):
    """A stand-in for a Train run: ``n`` reports as fast as the controller can make them, the
    last one (the test scores) just before it returns."""

    def run(reports):
        from orchestrator.run.trial import QueueReports

        cb = QueueReports(reports)
        for step in range(1, n):
            cb.after_report(None, [{"step": step, "i": i}], None)
        cb.after_report(None, [{"step": n, "i": i, "final": 1, "test/avg": 70.0 + i}],
                        SimpleNamespace(path=f"/ckpt/{i}"))
        return "done"

    return run


def test_every_report_reaches_tune_the_last_included(local_ray, tmp_path):
    """The run's final report is made just before it returns; Tune must see it and every
    report before it, in order, with no thread but the trial's calling tune.report."""
    from ray import tune

    from orchestrator.run.resources import TRIAL_DRIVER_RESOURCES
    from orchestrator.run.trial import forward_reports

    n = 25

    def trial(config):
        assert forward_reports(_burst(n, config["i"]), poll_s=0.05) == "done"

    grid = tune.Tuner(
        tune.with_resources(trial, TRIAL_DRIVER_RESOURCES),
        param_space={"i": tune.grid_search([0, 1, 2])},
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert all(r.error is None for r in grid)
    assert sorted(r.metrics.get("test/avg") for r in grid) == [70.0, 71.0, 72.0]
    for r in grid:
        assert r.metrics["final"] == 1 and r.metrics["checkpoint_path"] == f"/ckpt/{r.metrics['i']}"
        assert list(r.metrics_dataframe["step"]) == list(range(1, n + 1))


def test_reports_before_a_failure_are_passed_on_then_it_is_raised(local_ray):
    from orchestrator.run.trial import forward_reports

    def run(reports):
        reports.put({"step": 1})
        reports.put({"step": 2})
        raise MemoryError("worker ran out")

    seen: list[dict] = []
    with pytest.raises(MemoryError, match="worker ran out"):
        forward_reports(run, report=seen.append, poll_s=0.05)
    assert seen == [{"step": 1}, {"step": 2}]


def test_a_run_that_reports_nothing_returns_its_result(local_ray):
    from orchestrator.run.trial import forward_reports

    seen: list[dict] = []
    assert forward_reports(lambda reports: 7, report=seen.append, poll_s=0.05) == 7
    assert seen == []


def test_the_callback_is_a_train_user_callback():
    """Train V2 accepts only UserCallback instances in RunConfig.callbacks."""
    from ray.train.v2.api.callback import UserCallback

    from orchestrator.run.trial import QueueReports

    assert isinstance(QueueReports(queue=None), UserCallback)


def _launch(workers: int, gpus: float = 0.0, use_gpu: bool | None = None):
    from orchestrator.run.launch import Launch

    run = {"num_workers": workers, "use_gpu": use_gpu}
    return Launch(name="a", members=(("k", run),), storage="/s", cpus=2.0, gpus=gpus,
                  max_failures=0, keep_checkpoints=False, halving=None)


def test_a_one_worker_array_trains_in_its_trial_holding_its_resources():
    """One worker: the trial is the worker, so it holds the worker's CPUs (and GPUs when the
    runs use one); several: the trial only launches the Train run and holds nothing."""
    from orchestrator.run.resources import TRIAL_DRIVER_RESOURCES
    from orchestrator.run.trial import one_worker, trial_resources

    assert one_worker(_launch(1)) and not one_worker(_launch(2))
    assert trial_resources(_launch(1)) == {"CPU": 2.0}
    assert trial_resources(_launch(1, gpus=0.5, use_gpu=True)) == {"CPU": 2.0, "GPU": 0.5}
    assert trial_resources(_launch(1, gpus=0.5, use_gpu=False)) == {"CPU": 2.0}
    assert trial_resources(_launch(1, gpus=0.0, use_gpu=True)) == {"CPU": 2.0}
    assert trial_resources(_launch(2, gpus=1.0, use_gpu=True)) == TRIAL_DRIVER_RESOURCES
