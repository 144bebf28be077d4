from __future__ import annotations

import pytest
from orchestrator.launch import Resources, _trial_error


def test_concurrency_packs_by_cpu_and_gpu():
    assert Resources(1.0, 0.0).concurrency({"CPU": 2.0}) == 2  # this laptop: two runs at once
    assert Resources(1.0, 0.25).concurrency({"CPU": 16.0, "GPU": 1.0}) == 4  # four per GPU
    assert Resources(1.0, 0.25).concurrency({"CPU": 3.0, "GPU": 1.0}) == 3  # CPUs bind first
    assert Resources(1.0, 1.0).concurrency({"CPU": 16.0, "GPU": 2.0}) == 2
    assert Resources(1.0, 0.0, max_concurrent=1).concurrency({"CPU": 8.0}) == 1


def test_impossible_resources_name_the_fix():
    with pytest.raises(ValueError, match="--gpus-per-trial 2.0 but the cluster has 1 GPUs"):
        Resources(1.0, 2.0).concurrency({"CPU": 8.0, "GPU": 1.0})
    with pytest.raises(ValueError, match="--cpus-per-trial 4.0 but the cluster has 2 CPUs"):
        Resources(4.0, 0.0).concurrency({"CPU": 2.0})


def test_trial_error_extracts_the_one_line_reason(tmp_path):
    class T:
        error_file = str(tmp_path / "error.txt")

    (tmp_path / "error.txt").write_text(
        "Traceback (most recent call last):\n  File ...\n"
        "orchestrator.launch.TrialFailed: NonFiniteLoss: non-finite loss at step 7: term 'rank'\n")
    assert _trial_error(T()) == "NonFiniteLoss: non-finite loss at step 7: term 'rank'"
    T.error_file = str(tmp_path / "missing.txt")
    assert "trial failed" in _trial_error(T())


def test_last_report_still_queued_when_the_run_returns_reaches_tune(tmp_path):
    """TuneReportCallback's queue can still hold the run's final report (its test scores) when
    fit() returns; Tune would end the trial without it (a finished seed counted as missing)."""
    import ray
    from orchestrator.launch import TRIAL_DRIVER_RESOURCES, _forward_pending_reports
    from ray import tune

    from trainables.train import init_ray

    started = not ray.is_initialized()
    init_ray(num_cpus=2, log_to_driver=False)

    def trial(config):
        from ray.train._internal.session import get_session

        q = get_session()._get_or_create_inter_actor_queue()
        q.put({"step": 20, "final": 1, "test/avg": 70.0 + config["i"]})  # as the callback does
        _forward_pending_reports()

    try:
        grid = tune.Tuner(
            tune.with_resources(trial, TRIAL_DRIVER_RESOURCES),
            param_space={"i": tune.grid_search([0, 1, 2])},
            run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
        ).fit()
        assert sorted(r.metrics.get("test/avg") for r in grid) == [70.0, 71.0, 72.0]
        assert all(r.metrics.get("final") == 1 and r.error is None for r in grid)
    finally:
        if started:
            ray.shutdown()
