"""The training loop without Ray: every method runs, same seed gives same metrics, a killed run
resumed from its last checkpoint ends exactly like an uninterrupted one, NaN stops the run."""

from __future__ import annotations

import math

import pytest
import torch

from trainables import loop as loop_mod
from trainables.loop import NonFiniteLoss, Trainer
from trainables.profiles import build_config


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def tiny_cfg(tiny_bert, cache, method="kdmcse", **over):
    base = {
        "encoder": str(tiny_bert), "text_teachers": [str(tiny_bert)],
        "objective.teacher_weights": [1.0], "data.cache_dir": str(cache), "data.demo_dim": 32,
        "batch_size": 8, "max_steps": 6, "eval_every": 3, "eval_batch_size": 32,
    }
    base.update(over)
    return build_config("demo", method, base)


class Reports:
    def __init__(self, stop_after_step: int | None = None):
        self.metrics, self.ckpts, self.stop = [], [], stop_after_step

    def __call__(self, metrics, ckpt):
        self.metrics.append(metrics)
        if ckpt is not None:
            self.ckpts.append(ckpt)


def run(cfg, tmp, reports=None):
    t = Trainer(cfg)
    reports = reports or Reports()
    final = t.fit(reports, tmp)
    return t, reports, final


@pytest.mark.parametrize("method", ["simcse", "mcse", "kdmcse", "dalr"])
def test_every_method_trains_and_reports(method, tiny_bert, cache, tmp_path):
    cfg = tiny_cfg(tiny_bert, cache, method, max_steps=4, eval_every=2, final_eval=False)
    t, reports, _ = run(cfg, tmp_path)
    assert [m["step"] for m in reports.metrics] == [2, 4]
    for m in reports.metrics:
        assert math.isfinite(m["loss/total"]) and m["loss/total"] > 0
        assert 0 <= m["best_stsb_dev"] <= 100
    assert len(reports.ckpts) == 2 and (reports.ckpts[-1] / "state.pt").exists()
    # step 0 of the official schedule is a caption batch, so its terms were logged
    expected = {"simcse": set(), "mcse": {"grounding_image"},
                "kdmcse": {"grounding_image", "grounding_text"},
                "dalr": {"consistency", "cma", "info", "ima", "rank", "g2l"}}[method]
    logged = {k.removeprefix("loss/") for k in reports.metrics[0] if k.startswith("loss/")}
    assert expected <= logged, (expected, logged)


def test_same_seed_same_metrics(tiny_bert, cache, tmp_path):
    cfg = tiny_cfg(tiny_bert, cache)
    _, r1, f1 = run(cfg, tmp_path / "a")
    _, r2, f2 = run(cfg, tmp_path / "b")
    assert [m["loss/total"] for m in r1.metrics] == [m["loss/total"] for m in r2.metrics]
    assert f1 == f2
    _, r3, _ = run(cfg.with_overrides({"seed": 1}), tmp_path / "c")
    assert [m["loss/total"] for m in r3.metrics] != [m["loss/total"] for m in r1.metrics]


@pytest.mark.parametrize("kill_at", [2, 4, 5])
def test_resume_after_kill_matches_uninterrupted(kill_at, tiny_bert, cache, tmp_path,
                                                 monkeypatch):
    cfg = tiny_cfg(tiny_bert, cache, "dalr")
    ref, ref_reports, ref_final = run(cfg, tmp_path / "ref")

    class Killed(Exception):
        pass

    t = Trainer(cfg)
    orig = Trainer.train_step

    def dying_step(self, kind, indices):
        if self.step + 1 == kill_at:
            raise Killed
        return orig(self, kind, indices)

    monkeypatch.setattr(Trainer, "train_step", dying_step)
    partial = Reports()
    with pytest.raises(Killed):
        t.fit(partial, tmp_path / "killed")
    monkeypatch.setattr(Trainer, "train_step", orig)

    resumed = Trainer(cfg)
    if partial.ckpts:
        resumed.load_state(partial.ckpts[-1])
    rest = Reports()
    final = resumed.fit(rest, tmp_path / "resumed")
    assert [m["loss/total"] for m in partial.metrics + rest.metrics] == \
        [m["loss/total"] for m in ref_reports.metrics]
    assert final == ref_final
    for a, b in zip(resumed.student.state_dict().values(), ref.student.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)


def test_checkpoint_of_another_config_is_refused(tiny_bert, cache, tmp_path):
    cfg = tiny_cfg(tiny_bert, cache, max_steps=3, final_eval=False)
    _, reports, _ = run(cfg, tmp_path)
    other = Trainer(cfg.with_overrides({"seed": 9}))
    with pytest.raises(ValueError, match="belongs to config"):
        other.load_state(reports.ckpts[-1])


def test_nan_loss_stops_with_step_term_and_hash(tiny_bert, cache, tmp_path, monkeypatch):
    cfg = tiny_cfg(tiny_bert, cache, "kdmcse")
    real = loop_mod.compute_objective
    calls = {"n": 0}

    def poisoned(ocfg, student, teacher):
        terms = real(ocfg, student, teacher)
        calls["n"] += 1
        if teacher is not None:  # the first caption batch goes bad
            terms["grounding_image"] = terms["grounding_image"] * float("nan")
            terms["total"] = terms["total"] + terms["grounding_image"]
        return terms

    monkeypatch.setattr(loop_mod, "compute_objective", poisoned)
    t = Trainer(cfg)
    with pytest.raises(NonFiniteLoss, match=rf"step 1: term 'grounding_image'.*{cfg.config_hash()}"):
        t.fit(Reports(), tmp_path)


def test_final_eval_uses_best_checkpoint(tiny_bert, cache, tmp_path):
    cfg = tiny_cfg(tiny_bert, cache, "mcse")
    t, reports, final = run(cfg, tmp_path)
    for k in ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness",
              "avg", "alignment", "uniformity"):
        assert math.isfinite(final[f"test/{k}"]), k
    assert final["best_stsb_dev"] == max(m["stsb_dev"] for m in reports.metrics)
    # the evaluated model is the best one: its dev score is the best dev score
    assert t.evaluate_dev() == pytest.approx(final["best_stsb_dev"], abs=1e-6)


def test_feature_size_that_cma_cannot_use_is_refused_before_training(tiny_bert, cache):
    cfg = tiny_cfg(tiny_bert, cache, "dalr", **{"data.demo_dim": 48})
    with pytest.raises(ValueError, match=r"48-d but DALR's CMA .* 32-d embedding.*use_cma=false"):
        Trainer(cfg)
    Trainer(cfg.with_overrides({"objective.use_cma": False}))  # without CMA it is fine


def test_shuffle_images_grounds_each_caption_on_another_image(tiny_bert, cache):
    """The data.shuffle_images control: every caption gets the feature of one other image, the
    same for all captions of an image, one-to-one over images; the CLIP caption feature stays."""
    import numpy as np

    from trainables.data import load_data

    plain = load_data(tiny_cfg(tiny_bert, cache, "mcse"))
    shuffled = load_data(tiny_cfg(tiny_bert, cache, "mcse", **{"data.shuffle_images": True}))
    assert plain.image_rows is None
    ids = plain.pairs.image_ids()
    moved = ids[shuffled.image_rows]
    assert (moved != ids).all()
    mapping = dict(zip(ids, moved, strict=True))
    assert all(mapping[i] == m for i, m in zip(ids, moved, strict=True))  # a function of the image
    assert len(set(mapping.values())) == len(mapping)  # one-to-one over images

    def tokenize(captions):
        return {"input_ids": torch.zeros(len(captions), 2, dtype=torch.long),
                "attention_mask": torch.ones(len(captions), 2, dtype=torch.long)}

    idx = np.arange(8)
    a, b = plain.batch("pair", idx, tokenize, "cpu"), shuffled.batch("pair", idx, tokenize, "cpu")
    want = plain.batch("pair", shuffled.image_rows[idx], tokenize, "cpu")
    assert torch.equal(b.image, want.image) and not torch.equal(b.image, a.image)
    assert torch.equal(b.clip_text, a.clip_text)
