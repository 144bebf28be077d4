"""The Ray Train entry: a 2-worker DDP run on CPU, a worker killed mid-run and restored from its
checkpoint with the same result, a NaN that fails the run with its reason, and the CLI's errors."""

from __future__ import annotations

import math

import pytest

from trainables import train
from trainables.profiles import build_config


@pytest.fixture(scope="module")
def ray_session():
    import ray

    train.init_ray(num_cpus=2, log_to_driver=False)
    yield
    ray.shutdown()


def tiny(tiny_bert, tmp_path, method="mcse", **over):
    base = {"encoder": str(tiny_bert), "text_teachers": [str(tiny_bert)],
            "objective.teacher_weights": [1.0], "data.demo_dim": 32,
            "data.cache_dir": str(tmp_path / "cache"), "batch_size": 8, "max_steps": 6,
            "eval_every": 3, "eval_batch_size": 64}
    base.update(over)
    return build_config("demo", method, base)


def test_two_worker_ddp_run(tiny_bert, tmp_path, ray_session):
    cfg = tiny(tiny_bert, tmp_path, "kdmcse", num_workers=2, max_steps=4, eval_every=2)
    res = train.run_torch_trainer(cfg, "ddp", str(tmp_path / "runs"))
    assert res.error is None
    m = res.metrics
    assert m["final"] == 1 and m["step"] == 4
    assert math.isfinite(m["test/avg"])
    assert (tmp_path / "runs").exists() and res.checkpoint is not None


def test_killed_worker_restarts_from_checkpoint_with_same_result(tiny_bert, tmp_path, ray_session,
                                                                  monkeypatch):
    cfg = tiny(tiny_bert, tmp_path, "dalr")
    ref = train.run_torch_trainer(cfg, "ref", str(tmp_path / "runs"))
    assert ref.error is None
    monkeypatch.setenv("MMEMB_FAULT_INJECT", "kill:5")
    monkeypatch.setenv("MMEMB_FAULT_MARKER_DIR", str(tmp_path / "markers"))
    hit = train.run_torch_trainer(cfg, "killed", str(tmp_path / "runs"), max_failures=1)
    assert (tmp_path / "markers" / f"fault-kill-{cfg.config_hash()}").exists()  # it did die
    assert hit.error is None
    keys = [k for k in ref.metrics if k.startswith("test/")] + ["best_stsb_dev", "best_step"]
    assert keys and {k: hit.metrics[k] for k in keys} == {k: ref.metrics[k] for k in keys}


def test_nan_fails_the_run_with_step_and_term(tiny_bert, tmp_path, ray_session, monkeypatch):
    cfg = tiny(tiny_bert, tmp_path, "mcse", max_steps=3)
    monkeypatch.setenv("MMEMB_FAULT_INJECT", "nan:2")
    with pytest.raises(Exception) as err:  # Train V2's fit() raises the workers' error
        train.run_torch_trainer(cfg, "nan", str(tmp_path / "runs"))
    reason = train.root_cause(err.value)
    assert reason.startswith("NonFiniteLoss: non-finite loss at step 2: term 'total'"), reason
    assert cfg.config_hash() in reason


def test_cli_refuses_bad_input_before_starting(tmp_path, capsys):
    assert train.main(["--profile", "nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err
    assert train.main(["--profile", "demo", "lr=-1"]) == 2
    assert "lr=-1.0 must be > 0" in capsys.readouterr().err
    assert train.main(["--profile", "demo", "objective.margn=1"]) == 2
    assert "unknown setting 'objective.margn'" in capsys.readouterr().err
