"""An array of one worker trained inside its Tune trial: killed mid-run, Tune's restart continues
from its stored checkpoint to the same result as a run never killed, and a finished array started
again re-reports its final scores from its last checkpoint, training nothing."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from trainables.config.profiles import build_config


def tiny(tiny_bert, cache: Path, method: str, **over):
    base = {"encoder": str(tiny_bert), "text_teachers": [str(tiny_bert)], "data.demo_dim": 32,
            "data.cache_dir": str(cache), "batch_size": 8, "max_steps": 6, "eval_every": 3,
            "eval_batch_size": 64}
    base.update(over)
    return build_config("demo", method, base)


@pytest.fixture(scope="module")
def setting(tiny_bert, tmp_path_factory):
    """Two members, and an embedded Ray whose processes kill the array holding the second one
    once, at step 5 (the fault reaches the trials through Ray's environment, as in a table)."""
    import ray

    from trainables.runtime.ray_env import init_ray

    tmp = tmp_path_factory.mktemp("in-trial")
    runs = [("d", tiny(tiny_bert, tmp / "cache", "dalr")),
            ("m", tiny(tiny_bert, tmp / "cache", "mcse", seed=2))]
    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MMEMB_FAULT_INJECT", f"kill:5:{runs[1][1].config_hash()}")
        mp.setenv("MMEMB_FAULT_MARKER_DIR", str(tmp / "markers"))
        init_ray(num_cpus=2, log_to_driver=False)
    yield tmp, [(k, c.to_dict()) for k, c in runs]
    ray.shutdown()


def _table(tmp: Path, runs, name: str, experiment: str):
    """One Tune trial of ``trial_fn`` for the array ``runs``; its reports, in order."""
    from ray import tune

    from orchestrator.run.launch import Launch
    from orchestrator.run.trial import trial_fn, trial_resources

    plan = Launch(name=name, members=tuple(runs), storage=str(tmp / "runs"), cpus=1.0, gpus=0.0,
                  max_failures=1, keep_checkpoints=False, halving=None)
    grid = tune.Tuner(
        tune.with_resources(tune.with_parameters(trial_fn, arrays=[plan]), trial_resources(plan)),
        param_space={"index": 0},
        run_config=tune.RunConfig(name=experiment, storage_path=str(tmp / "tune"), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=1)),
    ).fit()
    (result,) = grid
    assert result.error is None, result.error
    return result.metrics_dataframe.to_dict("records"), result.metrics


def _scores(final: dict) -> dict:
    return {e["key"]: {k: v for k, v in e.items() if k.startswith("test/")
                       or k in ("best_stsb_dev", "best_step")} for e in final["members"]}


def test_killed_trial_continues_from_its_checkpoint_to_the_same_result(setting):
    tmp, runs = setting
    reports, hit = _table(tmp, runs, "array-x", "killed")
    assert list((tmp / "markers").iterdir())  # it did die, at step 5
    assert any(r.get("resumed") == 1 and r.get("step") == 3 for r in reports)  # from step 3's
    stored = sorted((tmp / "runs" / "array-x").glob("checkpoint_*"))
    assert len(stored) == 1 and Path(hit["checkpoint_path"]) == stored[0]  # only the final kept
    assert not list(stored[0].rglob("state.pt"))  # the best weights alone outlive the array
    for e in hit["members"]:
        assert (stored[0] / e["model"] / "MLmodel").is_file()
    _, ref = _table(tmp, runs, "array-y", "reference")  # the marker is there: no kill
    assert _scores(hit) == _scores(ref) and all(
        math.isfinite(e["test/avg"]) for e in ref["members"])
    # The same array started again (a --resume after the driver died at the very end): its final
    # scores come from the stored checkpoint and nothing trains.
    again, final = _table(tmp, runs, "array-x", "again")
    assert [r.get("step") for r in again] == [6] and _scores(final) == _scores(hit)
    assert os.environ.get("MMEMB_FAULT_INJECT") is None  # the fault stayed in Ray's processes
