"""precision=bf16 on the CPU: the array's forward really runs under bf16 autocast (the path a GPU
takes), and a mixed MCSE/KDMCSE/DALR array's loss terms track the fp32 run step by step.

Tolerance, stated: every loss term of every member at every one of 6 steps within 1% of its fp32
value plus 0.01 absolute (bf16 keeps 8 bits of mantissa, a relative rounding of 2^-9 per
operation; the terms then agree to about 0.2%, so the bound has a margin of five)."""

from __future__ import annotations

import torch

from tests.trainables.arrays.harness import cfg
from trainables.arrays.trainer import ArrayTrainer

STEPS, RTOL, ATOL = 6, 1e-2, 1e-2
METHODS = ("mcse", "kdmcse", "dalr")


def losses(tiny_bert, cache, precision: str) -> tuple[ArrayTrainer, list[dict[str, dict[str, float]]]]:
    # one step more than compared: the autocast check below takes it
    members = [(m, cfg(tiny_bert, cache, m, seed=i, precision=precision, max_steps=STEPS + 1,
                       final_eval=False)) for i, m in enumerate(METHODS)]
    t = ArrayTrainer(members)
    out = [{k: {n: float(v) for n, v in terms.items()} for k, terms in t.train_step().items()}
           for _ in range(STEPS)]
    return t, out


def test_bf16_autocast_on_cpu_tracks_fp32(tiny_bert, tmp_path):
    t32, fp32 = losses(tiny_bert, tmp_path, "fp32")
    t16, bf16 = losses(tiny_bert, tmp_path, "bf16")
    assert not t32.amp and t16.amp
    # the bf16 array's encoder really ran under CPU bf16 autocast (not CUDA's, a no-op here)
    seen = []
    hook = t16.model.encoder.register_forward_pre_hook(lambda *_: seen.append(
        (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))))
    t16.train_step()
    hook.remove()
    assert seen == [(True, torch.bfloat16)]
    worst, n = 0.0, 0
    for step, (a, b) in enumerate(zip(fp32, bf16, strict=True)):
        assert a.keys() == b.keys() == set(METHODS)
        for key in a:
            assert a[key].keys() == b[key].keys()
            for term, want in a[key].items():
                got = b[key][term]
                assert abs(got - want) <= RTOL * abs(want) + ATOL, (step, key, term, got, want)
                worst = max(worst, abs(got - want))
                n += 1
    assert n > 3 * STEPS  # every member's terms compared, caption steps' grounding terms too
    assert worst > 1e-5  # not the same numbers: the bf16 path changed the arithmetic
