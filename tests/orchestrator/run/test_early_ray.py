"""The embedded Ray's start beside the slow pre-start checks (``orchestrator.run.early_ray``):
only a fresh run on this machine starts it early, the table uses the Ray so started, and a
refusal after the start leaves no Ray running and nothing written, with its one line."""

from __future__ import annotations

import pytest

from orchestrator import ablate
from orchestrator.run import early_ray
from orchestrator.run.options import Options
from tests.orchestrator.refusing import refused
from tests.orchestrator.test_refusals import MISFIT_GRID
from trainables.testing import write_tiny_profile


@pytest.mark.parametrize("opts", [Options(address="127.0.0.1:1"), Options(resume=True),
                                  Options(queue=True)], ids=["address", "resume", "queue"])
def test_a_cluster_a_resume_and_a_queued_driver_start_ray_where_they_did(opts):
    import ray

    try:
        assert early_ray.start_beside_checks(opts) is False
        early_ray.wait()  # nothing started: nothing to wait for, nothing raised
        assert not ray.is_initialized()
    finally:
        early_ray.stop_unclaimed()


@pytest.mark.slow
def test_the_ray_started_beside_the_checks_is_the_one_the_driver_uses():
    import ray

    from trainables.runtime.ray_env import init_ray

    try:
        assert early_ray.start_beside_checks(Options()) is True
        assert early_ray.start_beside_checks(Options()) is False  # once per command
        early_ray.wait()
        assert ray.is_initialized()
        node = ray.get_runtime_context().get_node_id()
        init_ray(None, log_to_driver=False)  # what the session calls next: the same Ray
        assert ray.get_runtime_context().get_node_id() == node
        early_ray.stop_unclaimed()  # claimed by wait(): kept for the table
        assert ray.is_initialized()
    finally:
        early_ray.stop_unclaimed()
        ray.shutdown()


@pytest.mark.slow
def test_a_refusal_after_ray_started_beside_the_checks_leaves_no_ray(tmp_path_factory, tiny_bert,
                                                                     capsys, monkeypatch):
    """The method try (a slow check, after Ray's start) refuses: one line, exit 2, nothing
    written, and this process's Ray stopped again (``refused`` asserts it)."""
    space = tmp_path_factory.mktemp("early-ray")
    write_tiny_profile(space, tiny_bert)
    (space / "misfit_grid.py").write_text(MISFIT_GRID)  # a plug-in whose head misfits its loss
    started: list[bool] = []
    real = early_ray.start_beside_checks
    monkeypatch.setattr(early_ray, "start_beside_checks",
                        lambda opts: started.append(real(opts)) or started[-1])
    work = tmp_path_factory.mktemp("work")
    argv = ["--grid", str(space / "misfit_grid.py"), "--profile", str(space / "tiny.yaml"),
            "--storage", str(work / "runs"), "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}"]
    refused(work, ablate.main, argv, "method 'misfit' fails one text batch", capsys, monkeypatch)
    assert started == [True], "Ray did not start beside the checks"
