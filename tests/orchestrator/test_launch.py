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
