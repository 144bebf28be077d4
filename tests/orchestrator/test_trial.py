from __future__ import annotations


def test_last_report_still_queued_when_the_run_returns_reaches_tune(tmp_path):
    """TuneReportCallback's queue can still hold the run's final report (its test scores) when
    fit() returns; Tune would end the trial without it (finished members counted as missing)."""
    import ray
    from ray import tune

    from orchestrator.resources import TRIAL_DRIVER_RESOURCES
    from orchestrator.trial import _forward_pending_reports
    from trainables.ray_env import init_ray

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
