"""A captured step (``RunConfig.compile``, trainables/arrays/capture.py) gives the eager step's
losses and weights.

- ``default`` captures the stacked encoder; ``graphs`` the whole step (forward, teachers, every
  method's batched heads and loss terms, backward, the finite check's device half, clip and AdamW)
  as one compiled function. Both equal the eager step for an array of an MCSE, a KDMCSE, a DALR
  and a plug-in member (examples/softground.py), on every loss term of every step and on every
  weight and optimiser count after them, over text and caption steps alike.
- A member whose loss turns NaN inside a captured step leaves at that step, with the eager
  step's reason, its weights as they were before it (the captured update is masked per member);
  the others train on as in the eager run.
- A method on the per-member fallback (vmap cannot run it) keeps its steps outside the captured
  region, and says so once.

The default suite captures with the "aot_eager" backend (the same Dynamo capture and AOT
autograd, no code generation: seconds to a minute); the Inductor version is marked slow (minutes of
C++ compilation on a CPU)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.trainables.arrays.harness import cfg
from trainables.arrays import capture
from trainables.arrays.trainer import ArrayTrainer
from trainables.objectives.methods import (
    Method,
    Needs,
    Settings,
    load_methods,
    register,
    text_infonce,
)
from trainables.runtime.checks import POSITIVE, setting

STEPS = 3
WHOLE_STEPS = 6
"""the demo schedule at batch 8 alternates caption and text steps: steps 1 and 2 are eager (each
the first of its structure), 3 to 6 are captured, two of each kind"""
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
load_methods([str(EXAMPLES / "softground.py")])
MIX = ("mcse", "kdmcse", "dalr", "softground")


def train(tiny_bert, cache, mode, methods=MIX[:3], steps=STEPS, **over):
    t = ArrayTrainer([(f"{m}{i}" if methods.count(m) > 1 else m,
                       cfg(tiny_bert, cache, m, seed=i, max_steps=steps, final_eval=False,
                           compile=mode, **over)) for i, m in enumerate(methods)])
    t.model.train()
    terms = [{k: {n: float(v) for n, v in x.items()} for k, x in t.train_step().items()}
             for _ in range(steps)]
    return t, terms


def assert_close(eager, captured, tol):
    (te, se), (tc, sc) = eager, captured
    assert len(se) == len(sc)
    for a, b in zip(se, sc, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].keys() == b[k].keys()
            for n in a[k]:
                assert b[k][n] == pytest.approx(a[k][n], abs=tol, rel=tol), (k, n)
    for (name, p), q in zip(te.model.named_parameters(), tc.model.parameters(), strict=True):
        assert torch.allclose(p, q, atol=tol, rtol=0), name
    for (name, b), c in zip(te.model.named_buffers(), tc.model.buffers(), strict=True):
        assert torch.allclose(b, c, atol=tol, rtol=0), name  # DALR's BatchNorm statistics
    assert (te.optimizer.t, te.optimizer.s_st, te.optimizer.s_own) == \
           (tc.optimizer.t, tc.optimizer.s_st, tc.optimizer.s_own)
    for a, b in zip([*te.optimizer.m_st, *te.optimizer.v_st], [*tc.optimizer.m_st, *tc.optimizer.v_st],
                    strict=True):
        assert torch.allclose(a, b, atol=tol, rtol=0)


def compiled_frames() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["frames"].values()) if "frames" in counters else 0


@pytest.fixture
def aot_eager(monkeypatch):
    from torch._dynamo.utils import counters

    monkeypatch.setattr(capture, "BACKEND", "aot_eager")
    torch.compiler.reset()
    counters.clear()


def test_encoder_captured_step_equals_the_eager_one(tiny_bert, cache, aot_eager):
    """compile=default: the stacked encoder through Dynamo, the rest eager."""
    eager = train(tiny_bert, cache, "off")
    assert compiled_frames() == 0
    captured = train(tiny_bert, cache, "default")
    assert compiled_frames() > 0  # the encoder really went through Dynamo
    assert type(captured[0].model.encoder.encode).__name__ != "method"
    assert captured[0].whole is None
    assert_close(eager, captured, 1e-5)


@pytest.mark.slow  # a minute and more each; the arrays join runs -m slow on this file
def test_whole_captured_step_equals_the_eager_one(tiny_bert, cache, aot_eager):
    """compile=graphs: forward to update as one captured function, for the three built-in
    methods and a plug-in, over caption and text steps."""
    eager = train(tiny_bert, cache, "off", MIX, WHOLE_STEPS)
    captured = train(tiny_bert, cache, "graphs", MIX, WHOLE_STEPS)
    whole = captured[0].whole
    assert whole is not None and whole.captured_steps == WHOLE_STEPS - 2
    kinds = {key[1][0] for key in whole._learnt}
    assert kinds == {"pair", "text"}  # both kinds were learnt, then captured
    assert captured[0].objectives.looped == {}
    assert_close(eager, captured, 1e-5)
    # the caption steps' grounding terms are in what was compared (not only the text term)
    assert {"grounding", "text", "total"} <= set(captured[1][-2]["softground"])


@pytest.mark.slow
def test_inductor_step_equals_the_eager_one(tiny_bert, cache):
    torch.compiler.reset()
    assert_close(train(tiny_bert, cache, "off"), train(tiny_bert, cache, "default"), 1e-4)
    torch.compiler.reset()
    assert_close(train(tiny_bert, cache, "off", MIX, WHOLE_STEPS),
                 train(tiny_bert, cache, "graphs", MIX, WHOLE_STEPS), 1e-4)


class NaNImages:
    """A member's data whose caption batch number ``at`` (1-based) carries a NaN image feature:
    the member's grounding terms turn NaN inside that step."""

    def __init__(self, data, at):
        self.data, self.at, self.calls = data, at, 0

    def __getattr__(self, name):
        return getattr(self.data, name)

    def batch(self, kind, *a, **kw):
        b = self.data.batch(kind, *a, **kw)
        if kind == "pair":
            self.calls += 1
            if self.calls == self.at:
                b.image = b.image.clone()
                b.image[0, 0] = float("nan")
        return b


@pytest.mark.slow  # a minute and more each; the arrays join runs -m slow on this file
def test_a_member_whose_loss_turns_nan_in_a_captured_step_leaves_unchanged(tiny_bert, cache,
                                                                          aot_eager):
    """The third caption step (step 5, captured) gives KDMCSE's member a NaN image: it leaves at
    that step with the eager step's reason, its weights those of step 4, and the others train as
    in the eager run."""
    runs = {}
    for mode in ("off", "graphs"):
        t = ArrayTrainer([(m, cfg(tiny_bert, cache, m, seed=i, max_steps=WHOLE_STEPS,
                                  final_eval=False, compile=mode))
                          for i, m in enumerate(("mcse", "kdmcse", "dalr"))])
        t.model.train()
        t.alive[1].data = NaNImages(t.alive[1].data, at=3)
        seen, left = [], {}
        real_drop = t._drop

        def drop(bad, t=t, real_drop=real_drop, left=left):
            for j in bad:  # the leaving member's weights as the step left them
                left[t.alive[j].key] = t.model.member_state(j)
            real_drop(bad)

        t._drop = drop
        for step in range(WHOLE_STEPS):
            if step == 4:
                before = t.model.member_state(1)
            seen.append({k: {n: float(v) for n, v in x.items()} for k, x in t.train_step().items()})
        runs[mode] = (t, seen, left, before)
    (te, se, le, be), (tc, sc, lc, bc) = runs["off"], runs["graphs"]
    # steps 3 to 5 captured; step 6 is the first of the array of two (a new structure): eager
    assert tc.whole.captured_steps == 3
    assert [m.key for m in tc.alive] == [m.key for m in te.alive] == ["mcse", "dalr"]
    assert tc.members[1].record.error == te.members[1].record.error
    assert tc.members[1].record.error.startswith("non-finite loss at step 5: term ")
    assert set(lc) == set(le) == {"kdmcse"}
    for left, before in ((lc, bc), (le, be)):  # unchanged by the step it turned NaN in
        for part, tensors in before.items():
            for name, v in tensors.items():
                assert torch.equal(left["kdmcse"][part][name], v), (part, name)
    assert_close((te, se), (tc, sc), 1e-5)


@dataclass(frozen=True)
class ReadBackSettings(Settings):
    temperature: float = setting(0.05, POSITIVE)


@register
class ReadBack(Method):
    """SimCSE's text term through a host read (vmap cannot run it): the per-member fallback."""

    name = "readback"
    settings = ReadBackSettings

    def needs(self, s: ReadBackSettings) -> Needs:
        return Needs(captions=False, image=False)

    def text_loss(self, s, out):
        text = text_infonce(out, s.temperature)
        return {"text": text, "total": (1.0 if float(text.detach()) < 1e9 else 0.5) * text}


def test_a_method_on_the_fallback_stays_outside_said_once(tiny_bert, cache, aot_eager, capsys):
    eager = train(tiny_bert, cache, "off", ("readback", "readback"))
    capsys.readouterr()
    captured = train(tiny_bert, cache, "graphs", ("readback", "readback"))
    out = capsys.readouterr().out
    assert captured[0].whole.captured_steps == 0 and set(captured[0].objectives.looped) == {"readback"}
    said = [ln for ln in out.splitlines() if "outside the captured region" in ln]
    assert len(said) == 1 and "'readback'" in said[0]
    assert_close(eager, captured, 1e-5)


def test_compile_is_how_not_what(tiny_bert, cache):
    a = cfg(tiny_bert, cache, "mcse")
    assert a.config_hash() == cfg(tiny_bert, cache, "mcse", compile="graphs").config_hash()
    with pytest.raises(ValueError, match="share 'compile'"):
        ArrayTrainer([("a", a), ("b", cfg(tiny_bert, cache, "mcse", seed=1, compile="default"))])
