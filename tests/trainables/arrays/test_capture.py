"""A captured step (``RunConfig.compile``, trainables/arrays/capture.py): the array's step with
its encoder through torch.compile gives the eager step's losses and weights, for an array of an
MCSE, a KDMCSE and a DALR member, in 'default' and in 'graphs' (fixed shapes; CUDA graphs only on
CUDA). The default suite captures with the "aot_eager" backend (the same Dynamo capture and
AOT autograd, no code generation: seconds); the Inductor version is marked slow (minutes of C++
compilation on a CPU)."""

from __future__ import annotations

import pytest
import torch

from tests.trainables.arrays.harness import cfg
from trainables.arrays import capture
from trainables.arrays.trainer import ArrayTrainer

STEPS = 3


def train(tiny_bert, cache, mode):
    t = ArrayTrainer([(m, cfg(tiny_bert, cache, m, seed=i, max_steps=STEPS, final_eval=False,
                              compile=mode)) for i, m in enumerate(("mcse", "kdmcse", "dalr"))])
    t.model.train()
    terms = [{k: {n: float(v) for n, v in x.items()} for k, x in t.train_step().items()}
             for _ in range(STEPS)]
    return t, terms


def assert_close(eager, captured, tol):
    (te, se), (tc, sc) = eager, captured
    for a, b in zip(se, sc, strict=True):
        assert a.keys() == b.keys() == {"mcse", "kdmcse", "dalr"}
        for k in a:
            assert a[k].keys() == b[k].keys()
            for n in a[k]:
                assert b[k][n] == pytest.approx(a[k][n], abs=tol, rel=tol), (k, n)
    for (name, p), q in zip(te.model.named_parameters(), tc.model.parameters(), strict=True):
        assert torch.allclose(p, q, atol=tol, rtol=0), name


def compiled_frames() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["frames"].values()) if "frames" in counters else 0


@pytest.mark.parametrize("mode", ["default", "graphs"])
def test_captured_step_equals_the_eager_one(mode, tiny_bert, cache, monkeypatch):
    from torch._dynamo.utils import counters

    monkeypatch.setattr(capture, "BACKEND", "aot_eager")
    torch.compiler.reset()
    counters.clear()
    eager = train(tiny_bert, cache, "off")
    assert compiled_frames() == 0
    captured = train(tiny_bert, cache, mode)
    assert compiled_frames() > 0  # the encoder really went through Dynamo
    assert type(captured[0].model.encoder.encode).__name__ != "method"
    assert_close(eager, captured, 1e-5)


@pytest.mark.slow
def test_inductor_step_equals_the_eager_one(tiny_bert, cache):
    torch.compiler.reset()
    assert_close(train(tiny_bert, cache, "off"), train(tiny_bert, cache, "default"), 1e-4)


def test_compile_is_how_not_what(tiny_bert, cache):
    a = cfg(tiny_bert, cache, "mcse")
    assert a.config_hash() == cfg(tiny_bert, cache, "mcse", compile="graphs").config_hash()
    with pytest.raises(ValueError, match="share 'compile'"):
        ArrayTrainer([("a", a), ("b", cfg(tiny_bert, cache, "mcse", seed=1, compile="default"))])
