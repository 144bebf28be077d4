from __future__ import annotations

import pytest

from orchestrator.run.resources import Resources


def test_concurrency_packs_by_cpu_and_gpu():
    assert Resources(1.0, 0.0).concurrency({"CPU": 2.0}) == 2  # this laptop: two arrays at once
    assert Resources(1.0, 0.25).concurrency({"CPU": 16.0, "GPU": 1.0}) == 4  # four per GPU
    assert Resources(1.0, 0.25).concurrency({"CPU": 3.0, "GPU": 1.0}) == 3  # CPUs bind first
    assert Resources(1.0, 1.0).concurrency({"CPU": 16.0, "GPU": 2.0}) == 2
    assert Resources(1.0, 0.0, max_concurrent=1).concurrency({"CPU": 8.0}) == 1


def test_an_autoscaling_cluster_runs_max_concurrent_whatever_is_there_now():
    # a fresh `ray up` cluster: one GPU worker so far, eight asked for
    r = Resources(1.0, 1.0, max_concurrent=8)
    assert r.concurrency({"CPU": 4.0, "GPU": 1.0}) == 1
    assert r.concurrency({"CPU": 4.0, "GPU": 1.0}, autoscaling=True) == 8


def test_impossible_resources_name_the_fix():
    with pytest.raises(ValueError, match="--gpus-per-trial 2 but the cluster has 1 GPUs"):
        Resources(1.0, 2.0).check_fits({"CPU": 8.0, "GPU": 1.0}, "the cluster")
    with pytest.raises(ValueError, match="--cpus-per-trial 4 but this machine has 2 CPUs"):
        Resources(4.0, 0.0).check_fits({"CPU": 2.0}, "this machine")
    assert Resources(1.0, 0.5).fits({"CPU": 1.0, "GPU": 0.0}) == 0
