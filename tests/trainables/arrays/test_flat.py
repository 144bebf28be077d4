"""The stacked parameters as views of one buffer (trainables/arrays/flat.py): backward lands in
the buffer, a tensor no loss reached is a missing gradient to AdamW (torch's AdamW skips it, the
official one steps it on zeros once it has state), and members leaving keep every value."""

from __future__ import annotations

import pytest
import torch

from tests.trainables.arrays.test_optim import PATHS, hf_adamw, torch_adamw, use_private_kernels
from trainables.arrays.flat import FlatStack
from trainables.arrays.optim import ArrayAdamW, MemberHyper

M = 3


def _params(gen: torch.Generator) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.randn(M, 4, 5, generator=gen, dtype=torch.float64)),
            torch.nn.Parameter(torch.randn(M, 6, generator=gen, dtype=torch.float64))]


def test_parameters_become_views_and_a_backward_is_gathered_into_the_buffer():
    ps = _params(torch.Generator().manual_seed(0))
    before = [p.detach().clone() for p in ps]
    flat = FlatStack(ps)
    assert flat.data.shape == (M, 26) and flat.grad is None  # made at the gather
    for p, b in zip(ps, before, strict=True):
        assert torch.equal(p.detach(), b)  # the values moved into the buffer unchanged
        assert p.untyped_storage().data_ptr() == flat.data.untyped_storage().data_ptr()
    x = torch.randn(M, 5, dtype=torch.float64)
    (ps[0] * x[:, None, :]).sum().backward()  # reaches ps[0] only
    flat.sync()
    assert flat.reached() == [True, False]
    torch.testing.assert_close(flat.grad[:, :20].reshape(M, 4, 5), x[:, None, :].expand(M, 4, 5))
    assert torch.equal(flat.grad[:, 20:], torch.zeros(M, 6, dtype=torch.float64))
    assert ps[0].grad.untyped_storage().data_ptr() == flat.grad.untyped_storage().data_ptr()
    flat.grad.mul_(2)  # what the clip does: the parameters' .grad see it
    torch.testing.assert_close(ps[0].grad, 2 * x[:, None, :].expand(M, 4, 5))
    flat.zero_grad()
    assert flat.reached() == [False, False] and all(p.grad is None for p in ps)
    assert flat.grad is None  # no second copy of the gradients through the next backward
    # both reached: one concatenation; a gradient assigned from outside counts as one
    (ps[0] * x[:, None, :]).sum().backward()
    ps[1].grad = torch.ones(M, 6, dtype=torch.float64)
    flat.sync()
    assert flat.reached() == [True, True]
    torch.testing.assert_close(flat.grad[:, :20].reshape(M, 4, 5), x[:, None, :].expand(M, 4, 5))
    assert torch.equal(flat.grad[:, 20:], torch.ones(M, 6, dtype=torch.float64))
    flat.sync()  # a second sync in the same step changes nothing
    assert flat.reached() == [True, True] and torch.equal(flat.grad[:, 20:], torch.ones(M, 6, dtype=torch.float64))


@pytest.mark.parametrize("apart", [False, True])
@pytest.mark.parametrize("fused", PATHS)
@pytest.mark.parametrize("kind", ["official", "torch"])
def test_a_stacked_tensor_a_step_does_not_reach_is_a_missing_gradient(kind, fused, apart, monkeypatch):
    """Tensor 1 is reached from the second step on, then every other step: the buffer's zeros
    for it must give the per-tensor semantics (no state before its first gradient; skipped by
    torch's AdamW; stepped on zeros by the official one). ``apart``: tensor 0 stays a tensor of
    its own (an embedding table), updated the same way."""
    use_private_kernels(monkeypatch, fused)
    gen = torch.Generator().manual_seed(1)
    ps = _params(gen)
    lrs, wds = [1e-2, 3e-3, 1e-2], [0.0, 0.1, 0.0]
    opt = ArrayAdamW(ps, [[] for _ in range(M)],
                     [MemberHyper(lr, wd, 1e-6, 1e9, kind) for lr, wd in zip(lrs, wds, strict=True)], 20,
                     apart=ps[:1] if apart else ())
    assert opt.flat is not None and len(opt.flat.params) == (1 if apart else 2)
    assert ps[0].is_contiguous() == apart
    ref = [[p.detach()[i].clone() for p in ps] for i in range(M)]
    state = [[{}, {}] for _ in range(M)]
    written = hf_adamw if kind == "official" else torch_adamw
    for t in range(9):
        reach1 = t >= 1 and t % 2 == 1
        w = [torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in ps]
        loss = (ps[0] * w[0]).sum() + ((ps[1] * w[1]).sum() if reach1 else 0.0)
        loss.backward()
        opt.step()
        opt.zero_grad()
        for i in range(M):
            lr = lrs[i] * max(0.0, 1 - t / 20)
            written(ref[i][0], w[0][i], state[i][0], lr, 1e-6, wds[i])
            g1 = w[1][i] if reach1 else (torch.zeros(6, dtype=torch.float64)
                                          if kind == "official" and state[i][1] else None)
            written(ref[i][1], g1, state[i][1], lr, 1e-6, wds[i])
    for i in range(M):
        for k, p in enumerate(ps):
            torch.testing.assert_close(p.detach()[i], ref[i][k], rtol=1e-10, atol=1e-12)
    assert opt.s_st == [9, 8 if kind == "official" else 4]


def test_members_leaving_keep_values_gradients_and_moments():
    gen = torch.Generator().manual_seed(2)
    ps = _params(gen)
    opt = ArrayAdamW(ps, [[] for _ in range(M)], [MemberHyper(1e-2, 0.0, 1e-6, 1e9)] * M, 10)
    for _ in range(2):
        sum((p * torch.randn(p.shape, generator=gen, dtype=torch.float64)).sum() for p in ps).backward()
        opt.step()
        opt.zero_grad()
    sum((p * torch.randn(p.shape, generator=gen, dtype=torch.float64)).sum() for p in ps).backward()
    keep = [2, 0]
    want = {"p": [p.detach()[keep].clone() for p in ps], "g": [p.grad[keep].clone() for p in ps],
            "m": [m[keep].clone() for m in opt.m_st], "v": [v[keep].clone() for v in opt.v_st]}
    with torch.no_grad():  # what ArrayModel.select does to a stacked parameter
        for p in ps:
            grad = p.grad[keep]
            p.data = p.data[keep]
            p.grad = grad
    opt.select(keep, ps)
    assert opt.flat is not None and opt.flat.data.shape == (2, 26)
    for k, p in enumerate(ps):
        assert torch.equal(p.detach(), want["p"][k]) and torch.equal(p.grad, want["g"][k])
        assert torch.equal(opt.m_st[k], want["m"][k]) and torch.equal(opt.v_st[k], want["v"][k])
    # the next step updates the buffer the parameters are views of
    opt.step()
    assert not torch.equal(ps[0].detach(), want["p"][0])
    assert torch.equal(opt.flat.data[:, :20].reshape(2, 4, 5), ps[0].detach())


def test_a_parameter_replaced_behind_the_optimiser_is_refused():
    ps = _params(torch.Generator().manual_seed(3))
    opt = ArrayAdamW(ps, [[] for _ in range(M)], [MemberHyper(1e-2, 0.0, 1e-6, 1e9)] * M, 10)
    with torch.no_grad():
        ps[0].data = ps[0].data[[0, 1]]
    with pytest.raises(RuntimeError, match="ArrayAdamW.select"):
        opt.clip()
