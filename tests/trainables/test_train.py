"""The Ray Train entry: a 2-worker DDP array on CPU, a worker killed mid-run and restored from its
checkpoint with the same result, a NaN that drops its member with the reason, a finished array
re-reported from its final checkpoint, and the CLI's errors."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from trainables import train
from trainables.config.profiles import build_config
from trainables.models.mlflow_export import DATA
from trainables.runtime import ray_env


@pytest.fixture(scope="module")
def ray_session():
    import ray

    ray_env.init_ray(num_cpus=2, log_to_driver=False)
    yield
    ray.shutdown()


def tiny(tiny_bert, tmp_path, method="mcse", **over):
    base = {"encoder": str(tiny_bert), "text_teachers": [str(tiny_bert)], "data.demo_dim": 32,
            "data.cache_dir": str(tmp_path / "cache"), "batch_size": 8, "max_steps": 6,
            "eval_every": 3, "eval_batch_size": 64}
    base.update(over)
    return build_config("demo", method, base)


def members(m) -> dict:
    return {e["key"]: e for e in m["members"]}


@pytest.mark.slow  # a minute of Ray Train with two workers; the lab cluster's join runs it
def test_two_worker_ddp_run(tiny_bert, tmp_path, ray_session):
    a = tiny(tiny_bert, tmp_path, "kdmcse", num_workers=2, max_steps=4, eval_every=2)
    b = tiny(tiny_bert, tmp_path, "mcse", num_workers=2, max_steps=4, eval_every=2, seed=1)
    res = train.run_torch_trainer([("a", a), ("b", b)], "ddp", str(tmp_path / "runs"))
    assert res.error is None
    m = res.metrics
    assert m["final"] == 1 and m["step"] == 4
    got = members(m)
    assert set(got) == {"a", "b"} and all(math.isfinite(e["test/avg"]) for e in got.values())
    assert res.checkpoint is not None
    final = Path(res.checkpoint.path)
    assert not list(final.rglob("state.pt"))  # only the best weights outlive the array
    for e in got.values():  # each member's best student as an MLflow model around its HF folder
        assert e["model"] == f"members/{e['key']}/model"
        assert (final / e["model"] / "MLmodel").is_file()
        assert (final / e["model"] / DATA / "config.json").is_file()


@pytest.mark.slow  # a minute of Ray Train with two workers; the lab cluster's join runs it
def test_killed_worker_restarts_from_checkpoint_with_same_result(tiny_bert, tmp_path, ray_session,
                                                                  monkeypatch):
    cfgs = [("d", tiny(tiny_bert, tmp_path, "dalr")), ("m", tiny(tiny_bert, tmp_path, "mcse", seed=2))]
    ref = train.run_torch_trainer(cfgs, "ref", str(tmp_path / "runs"))
    assert ref.error is None
    monkeypatch.setenv("MMEMB_FAULT_INJECT", "kill:5")
    monkeypatch.setenv("MMEMB_FAULT_MARKER_DIR", str(tmp_path / "markers"))
    hit = train.run_torch_trainer(cfgs, "killed", str(tmp_path / "runs"), max_failures=1)
    assert list((tmp_path / "markers").iterdir())  # it did die
    assert hit.error is None
    for key, r in members(ref.metrics).items():
        h = members(hit.metrics)[key]
        keys = [k for k in r if k.startswith("test/")] + ["best_stsb_dev", "best_step"]
        assert keys and {k: h[k] for k in keys} == {k: r[k] for k in keys}
    # a finished array started again reports its final scores from the checkpoint, trains nothing
    again = train.run_torch_trainer(cfgs, "ref", str(tmp_path / "runs"))
    assert {k: v["test/avg"] for k, v in members(again.metrics).items()} == \
        {k: v["test/avg"] for k, v in members(ref.metrics).items()}


def test_nan_drops_its_member_with_step_and_term(tiny_bert, tmp_path, ray_session, monkeypatch):
    """Also: a one-worker array's Train controller, which only schedules, never imports torch
    (the members travel as dicts, the trainer has no torch backend), and the run starts none of
    the helper actors ``ray_env.lean_trainer`` leaves out."""
    from tests.trainables.controller_probe import ControllerProbe

    bad, good = tiny(tiny_bert, tmp_path, "mcse", max_steps=3), tiny(tiny_bert, tmp_path, "mcse", max_steps=3, seed=1)
    monkeypatch.setenv("MMEMB_FAULT_INJECT", f"nan:2:{bad.config_hash()}")
    probe = tmp_path / "controller.json"
    res = train.run_torch_trainer([("bad", bad.to_dict()), ("good", good.to_dict())], "nan",
                                  str(tmp_path / "runs"), callbacks=[ControllerProbe(probe)],
                                  methods={})
    seen = json.loads(probe.read_text())
    assert seen["pid"] != os.getpid() and seen["torch"] is False
    assert "TrainController" in seen["actors"] and "RayTrainWorker" in seen["actors"]
    assert not {"DatasetManager", "PlacementGroupCleaner", "PreemptionWatcher"} & set(seen["actors"])
    got = members(res.metrics)
    assert got["bad"]["failed"] == 1
    assert got["bad"]["error"].startswith("non-finite loss at step 2: term 'total'")
    assert bad.config_hash() in got["bad"]["error"]
    assert math.isfinite(got["good"]["test/avg"])


def test_cli_refuses_bad_input_before_starting(tmp_path, capsys):
    assert train.main(["--profile", "nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err
    assert train.main(["--profile", "demo", "lr=-1"]) == 2
    assert "lr=-1.0 must be a finite number > 0" in capsys.readouterr().err
    assert train.main(["--profile", "demo", "objective.margn=1"]) == 2
    assert "unknown setting 'objective.margn'" in capsys.readouterr().err


def test_cli_refuses_a_schedule_that_cannot_run_before_ray_starts(tiny_bert, tmp_path, capsys):
    """More caption batches than text batches: the official schedule divides by zero."""
    import numpy as np
    import ray

    from trainables.data.store import StoreMetadata, write_store

    (tmp_path / "wiki.txt").write_text("a man rides a horse\n" * 8)  # 1 text batch
    write_store(tmp_path / "pairs.parquet", ["a dog"] * 32, [str(i) for i in range(32)],  # 4 pair
                {"image": np.ones((32, 8), np.float32)}, StoreMetadata("gen", 8, None, None, False))
    (tmp_path / "senteval").mkdir()
    was = ray.is_initialized()
    rc = train.main(["--profile", "demo", f"encoder={tiny_bert}", "data.demo=false",
                     f"data.text={tmp_path / 'wiki.txt'}", f"data.pairs={tmp_path / 'pairs.parquet'}",
                     f"data.senteval={tmp_path / 'senteval'}", "batch_size=8"])
    err = capsys.readouterr().err
    assert rc == 2 and "4 pair batches > 1 text batches" in err and "schedule=proportional" in err, err
    assert ray.is_initialized() == was  # refused before Ray
