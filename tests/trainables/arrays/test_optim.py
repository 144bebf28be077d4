"""ArrayAdamW against transformers.AdamW 4.x and torch 2's AdamW, written out here, on the fused
and the single-tensor path: per-member learning rates, a head that only some steps reach."""

from __future__ import annotations

import math

import pytest
import torch

from trainables.arrays import kernels
from trainables.arrays.optim import ArrayAdamW, MemberHyper

PATHS = [True, False] if kernels.FUSED_ADAMW else [False]
"""torch's private kernels (``kernels.py``), and the public fallbacks a torch without them runs"""


def use_private_kernels(monkeypatch, on: bool) -> None:
    """The fused AdamW kernel and the multi-tensor calls, or (``on`` false) the single-tensor
    update and the public loops, as on a torch whose kernels are missing or changed."""
    monkeypatch.setattr(kernels, "FUSED_ADAMW", on)
    if not on:
        for name in ("_norm_kernel", "_mul_kernel", "_copy_kernel"):
            monkeypatch.setattr(kernels, name, None)

B1, B2 = 0.9, 0.999


def hf_adamw(p, g, st, lr, eps, wd):
    """transformers.AdamW.step (4.8) for one tensor; ``g`` None: skipped, as it is there."""
    if g is None:
        return
    if not st:
        st.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
    st["step"] += 1
    st["m"].mul_(B1).add_(g, alpha=1 - B1)
    st["v"].mul_(B2).addcmul_(g, g, value=1 - B2)
    denom = st["v"].sqrt().add_(eps)
    size = lr * math.sqrt(1 - B2 ** st["step"]) / (1 - B1 ** st["step"])
    p.addcdiv_(st["m"], denom, value=-size)
    if wd > 0:
        p.add_(p, alpha=-lr * wd)


def torch_adamw(p, g, st, lr, eps, wd):
    """torch 2's AdamW for one tensor, a missing gradient skipped."""
    if g is None:
        return
    if not st:
        st.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
    st["step"] += 1
    p.mul_(1 - lr * wd)
    st["m"].lerp_(g, 1 - B1)
    st["v"].mul_(B2).addcmul_(g, g, value=1 - B2)
    denom = st["v"].sqrt() / math.sqrt(1 - B2 ** st["step"]) + eps
    p.addcdiv_(st["m"], denom, value=-lr / (1 - B1 ** st["step"]))


@pytest.mark.parametrize("fused", PATHS)
@pytest.mark.parametrize("kind", ["official", "torch"])
def test_update_is_the_written_out_one_per_member(kind, fused, monkeypatch):
    use_private_kernels(monkeypatch, fused)
    g = torch.Generator().manual_seed(0)
    M, steps, total = 3, 12, 20
    lrs, wds = [1e-2, 3e-3, 1e-2], [0.0, 0.1, 0.0]
    stacked = torch.nn.Parameter(torch.randn(M, 4, 5, generator=g, dtype=torch.float64))
    heads = [[torch.nn.Parameter(torch.randn(6, generator=g, dtype=torch.float64))] for _ in range(M)]
    never = [torch.nn.Parameter(torch.randn(2, dtype=torch.float64)) for _ in range(M)]
    own = [h + [n] for h, n in zip(heads, never, strict=True)]
    hyper = [MemberHyper(lr, wd, 1e-6, 1e9, kind) for lr, wd in zip(lrs, wds, strict=True)]
    opt = ArrayAdamW([stacked], own, hyper, total)
    ref_p = [stacked.detach()[i].clone() for i in range(M)]
    ref_h = [heads[i][0].detach().clone() for i in range(M)]
    ref_st = [{} for _ in range(M)]
    ref_sh = [{} for _ in range(M)]
    start = [n.detach().clone() for n in never]
    written = hf_adamw if kind == "official" else torch_adamw
    for t in range(steps):
        gs = torch.randn(M, 4, 5, generator=g, dtype=torch.float64) * 1e-3
        gh = [torch.randn(6, generator=g, dtype=torch.float64) for _ in range(M)]
        reached = t % 3 == 0  # the heads: one step in three, from the first
        stacked.grad = gs.clone()
        for i in range(M):
            heads[i][0].grad = gh[i].clone() if reached else None
        opt.step()
        lr_t = [lr * max(0.0, 1 - t / total) for lr in lrs]
        for i in range(M):
            written(ref_p[i], gs[i], ref_st[i], lr_t[i], 1e-6, wds[i])
            # official: torch 1.7's zero_grad kept a zero gradient once the head had one
            gi = gh[i] if reached else (torch.zeros(6, dtype=torch.float64)
                                        if kind == "official" and ref_sh[i] else None)
            written(ref_h[i], gi, ref_sh[i], lr_t[i], 1e-6, wds[i])
        opt.zero_grad()
    for i in range(M):
        torch.testing.assert_close(stacked.detach()[i], ref_p[i], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(heads[i][0].detach(), ref_h[i], rtol=1e-10, atol=1e-12)
        assert torch.equal(never[i].detach(), start[i])  # never reached: no state, no move
    assert opt.s_own[0] == [12 if kind == "official" else 4, 0]


def test_the_two_updates_differ_where_the_issue_says():
    """Step 1: the official step is (g + eps) / (g + eps / sqrt(1 - b2)) of torch's (0.24 at g 1e-5)."""
    out = {}
    for kind in ("official", "torch"):
        p = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
        opt = ArrayAdamW([], [[p]], [MemberHyper(1.0, 0.0, 1e-6, 1e9, kind)], 10)
        p.grad = torch.tensor([1e-5, 1e-4, 1.0], dtype=torch.float64)
        opt.step()
        out[kind] = -p.detach()
    ratio = out["official"] / out["torch"]
    g = torch.tensor([1e-5, 1e-4, 1.0], dtype=torch.float64)
    torch.testing.assert_close(ratio, (g + 1e-6) / (g + 1e-6 / math.sqrt(1 - B2)), rtol=1e-9, atol=0)
    assert ratio[0] < 0.3 and ratio[2] > 0.9999


def test_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="optimizer='adam'"):
        ArrayAdamW([], [[]], [MemberHyper(1.0, 0.0, 1e-6, 1.0, "adam")], 10)


@pytest.mark.parametrize("fused", PATHS)
def test_a_gradient_in_another_layout_updates_the_right_elements(fused, monkeypatch):
    """vmap hands a head's weight gradient over as a transposed view (other strides than the
    weight's); the update must be the one of the same gradient laid out as the weight."""
    use_private_kernels(monkeypatch, fused)
    g = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    out = []
    for grad in (g.clone(), g.t().contiguous().t()):  # equal values, transposed strides
        p = torch.nn.Parameter(torch.zeros(5, 4))
        opt = ArrayAdamW([], [[p]], [MemberHyper(1e-2, 0.0, 1e-6, 1e9, "official")], 10)
        p.grad = grad
        assert p.grad.stride() == grad.stride()
        opt.step()
        out.append(p.detach().clone())
    assert torch.equal(out[0], out[1])
    torch.testing.assert_close(out[0], -1e-2 * g.sign(), rtol=1e-3, atol=1e-6)


def test_clip_norm_keeps_float32_accuracy_over_a_long_stacked_row():
    """A member's clip norm over millions of float32 gradients (its row of the flat buffer, an
    embedding table kept apart) within 1e-6 of the float64 norm. torch's CPU norm adds a row's
    squares one after another: here it was 9.5e-5 off (rows of 4M and 3M), and clipping then
    scales the whole update by that error (docs/official-code.md "The loop")."""
    torch.manual_seed(0)
    stacked = [torch.nn.Parameter(torch.zeros(2, 1000, 2000)), torch.nn.Parameter(torch.zeros(2, 3000, 1000)),
               torch.nn.Parameter(torch.zeros(2, 3))]
    opt = ArrayAdamW(stacked, [[], []], [MemberHyper(1e-3, 0.0, 1e-6, 1.0)] * 2, 10,
                     apart=[stacked[1]])
    assert opt.flat is not None and opt.loose_idx == [1]
    for p in stacked:
        p.grad = torch.randn_like(p) * torch.rand_like(p) ** 8
    exact = torch.stack([p.grad.double().flatten(1).pow(2).sum(1) for p in stacked]).sum(0).sqrt()
    norms = opt.member_grad_norms()
    assert norms.dtype == torch.float32
    assert ((norms.double() - exact) / exact).abs().max() < 1e-6
