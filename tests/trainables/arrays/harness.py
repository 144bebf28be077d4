"""What the array tests share: a member's config on the demo profile at test sizes, the reports an
array sends, an array run to its end, the check that a member trained the same in two runs, and
an array killed mid-run and resumed from its checkpoint."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from trainables.arrays.trainer import ArrayTrainer
from trainables.config.profiles import build_config

TOL = 1e-5
"""member independence on the CPU in fp32: losses, dev curve and test scores"""
DEV_TOL = 0.05
"""dev Spearman (x 100): a rank statistic, so the last-bit differences of a batched matmul over M
members (every weight within 4e-9, every loss within 1e-5) can swap one near-tied pair of the
small generated dev set (seen: 0.012)"""
TEST_TOL = 0.2
"""final test scores, the same on the smaller generated subsets (seen: 0.15 on one STS12 subset)"""


def cfg(encoder, cache, method="kdmcse", seed=0, **over):
    """A member on the demo profile at test sizes; ``encoder`` is also DALR's one teacher (the
    demo's weight, 1.0)."""
    base = {
        "encoder": str(encoder), "text_teachers": [str(encoder)],
        "data.cache_dir": str(cache), "data.demo_dim": 32,
        "batch_size": 8, "max_steps": 6, "eval_every": 3, "eval_batch_size": 32, "seed": seed,
    }
    base.update(over)
    return build_config("demo", method, base)


class Reports:
    """The ``report`` callback of ``ArrayTrainer.fit``: every step's metrics and checkpoints."""

    def __init__(self):
        self.metrics, self.ckpts = [], []

    def __call__(self, metrics, ckpt):
        self.metrics.append(metrics)
        if ckpt is not None:
            self.ckpts.append(ckpt)

    def member(self, key):
        """key's entries, in report order, with the report's step."""
        return [{**e, "step": r["step"]} for r in self.metrics for e in r["members"] if e["key"] == key]


def run(members, tmp, **kw):
    """-> (trainer, reports, final scores) of an array trained to its end."""
    t = ArrayTrainer(members, **kw)
    reports = Reports()
    final = t.fit(reports, tmp)
    return t, reports, final


def assert_same_member(a: Reports, fa: dict, b: Reports, fb: dict, key_a: str, key_b: str | None = None):
    """Member ``key_a`` of run a trained as ``key_b`` of run b: every loss term, dev score and lr
    at every report, and every test score, within TOL."""
    key_b = key_a if key_b is None else key_b
    ea, eb = a.member(key_a), b.member(key_b)
    assert len(ea) == len(eb) > 0
    for x, y in zip(ea, eb, strict=True):
        assert x["step"] == y["step"]
        for k in x:
            if k.startswith("loss/") or k == "lr":
                assert y[k] == pytest.approx(x[k], abs=TOL), (k, x["step"])
            elif k in ("stsb_dev", "best_stsb_dev"):
                assert y[k] == pytest.approx(x[k], abs=DEV_TOL), (k, x["step"])
    for k, v in fa[key_a].items():
        if k.startswith("test/"):
            assert fb[key_b][k] == pytest.approx(v, abs=TEST_TOL), k


class Killed(Exception):
    """Raised inside a training step: the array's process dies there."""


@dataclass
class Resumed:
    partial: Reports
    """what the killed array reported before it died"""
    trainer: ArrayTrainer
    """the fresh array that resumed from the last checkpoint and trained to the end"""
    start: int
    """the step it resumed from (0: no checkpoint yet, it started over)"""
    reports: Reports
    """every report of both, in order: what one uninterrupted array would have sent"""
    final: dict


def kill_and_resume(members, kill_at: int, tmp, monkeypatch, **kw) -> Resumed:
    """Train ``members`` until step ``kill_at`` raises, then resume a fresh array from the last
    checkpoint written (if any) and train it to the end, as a restarted worker does."""
    orig = ArrayTrainer.train_step

    def dying_step(self):
        if self.step + 1 == kill_at:
            raise Killed
        return orig(self)

    t = ArrayTrainer(members, **kw)
    partial = Reports()
    monkeypatch.setattr(ArrayTrainer, "train_step", dying_step)
    with pytest.raises(Killed):
        t.fit(partial, tmp / "killed")
    monkeypatch.setattr(ArrayTrainer, "train_step", orig)
    resumed = ArrayTrainer(members, **kw)
    if partial.ckpts:
        resumed.load_state(partial.ckpts[-1])
    start = resumed.step
    rest = Reports()
    final = resumed.fit(rest, tmp / "resumed")
    both = Reports()
    both.metrics = partial.metrics + rest.metrics
    return Resumed(partial, resumed, start, both, final)
