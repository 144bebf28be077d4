"""trainables.objectives.core against hand cases and the loop references."""

from __future__ import annotations

import math

import pytest
import torch

from tests.trainables.objectives.references import (
    DT,
    TOL,
    batch,
    close,
    cos,
    ref_arcsim,
    ref_ce,
    ref_cos_matrix,
    rows,
)
from trainables.objectives.core import (
    adapacse_loss,
    angular_margin_logits,
    mcse_grounding_loss,
    safe_acos,
    simcse_loss,
    threshold_bias,
)


# ============================================================================== hand cases
def test_simcse_hand_case():
    # z1 = z2 = I2, tau 0.5: logits [[2, 0], [0, 2]]; CE per row = log(1 + e^-2)
    eye = torch.eye(2, dtype=DT)
    assert close(simcse_loss(eye, eye, 0.5), math.log(1 + math.exp(-2)))


def test_arcsim_hand_cases():
    eye = torch.eye(2, dtype=DT)
    # off-diagonal theta = pi/2 > 0.1 -> cos(pi/2 - 0.1) = sin(0.1); diagonal cos(0) = 1
    out = angular_margin_logits(eye, eye, 1.0, 0.1)
    assert torch.allclose(out, torch.tensor([[1, math.sin(0.1)], [math.sin(0.1), 1]], dtype=DT))
    # teacher similarity 0.5 halves the margin: sin(0.05)
    s = torch.tensor([[1.0, 0.5], [0.5, 1.0]], dtype=DT)
    out = angular_margin_logits(eye, eye, 0.5, 0.1, s)
    assert close(out[0, 1], math.sin(0.05) / 0.5) and close(out[1, 1], 2.0)
    # theta_01 = 0.05 < m = 0.1: not eligible, stays cos(0.05); with m = 0.01: cos(0.04)
    x = torch.tensor([[1.0, 0.0], [math.cos(0.05), math.sin(0.05)]], dtype=DT)
    assert close(angular_margin_logits(x, x, 1.0, 0.1)[0, 1], math.cos(0.05))
    assert close(angular_margin_logits(x, x, 1.0, 0.01)[0, 1], math.cos(0.04))
    # Eq. 12 has no eligibility test: theta 0.05 < m 0.2 still moves, cos(0.05 - 0.2) = cos(0.15)
    # (the code form leaves it at cos(0.05))
    assert close(angular_margin_logits(x, x, 1.0, 0.2, form="eq12")[0, 1], math.cos(0.15))
    assert close(angular_margin_logits(x, x, 1.0, 0.2)[0, 1], math.cos(0.05))
    # ArcCSE: the positive moves to cos(0 + 0.3), negatives untouched
    out = angular_margin_logits(eye, eye, 1.0, 0.3, form="arccse")
    assert close(out[0, 0], math.cos(0.3)) and close(out[0, 1], 0.0)
    # margin 0 is plain cosine / tau
    assert torch.equal(angular_margin_logits(eye, eye, 0.5, 0.0), eye / 0.5)


def test_threshold_bias_hand_case():
    scores = torch.tensor([[0.9, 0.9], [0.1, 0.95]], dtype=DT)
    # (0,1) is above 0.8 and off the diagonal; diagonals are never masked
    expect = torch.tensor([[0.0, -99999.99], [0.0, 0.0]], dtype=DT)
    assert torch.equal(threshold_bias(scores, 0.8), expect)


def test_mcse_grounding_hand_case():
    eye = torch.eye(2, dtype=DT)
    # each view: logits I2/1 -> CE = log(1 + e^-1); averaged over views -> same; summed -> double
    assert close(mcse_grounding_loss(eye, eye, eye, 1.0), math.log(1 + math.exp(-1)))
    assert close(
        mcse_grounding_loss(eye, eye, eye, 1.0, reduce_views="sum"), 2 * math.log(1 + math.exp(-1))
    )


# ======================================================================= parity with loops
@pytest.mark.parametrize("seed", [0, 1])
def test_angular_margin_logits_parity(seed):
    st, te = batch(seed=seed)
    S = ref_cos_matrix(rows(te.image), rows(te.image))
    for form in ("code", "eq12"):
        got = angular_margin_logits(st.p1, st.v, 0.05, 0.15, torch.tensor(S, dtype=DT), form=form)
        ref = ref_arcsim(rows(st.p1), rows(st.v), 0.05, 0.15, S, form=form)
        assert torch.allclose(got, torch.tensor(ref, dtype=DT), atol=TOL)
    got = angular_margin_logits(st.z1, st.z2, 0.05, 0.18)
    assert torch.allclose(
        got, torch.tensor(ref_arcsim(rows(st.z1), rows(st.z2), 0.05, 0.18), dtype=DT), atol=TOL
    )
    got = angular_margin_logits(st.z1, st.z2, 0.05, 0.18, form="arccse")
    ref = ref_arcsim(rows(st.z1), rows(st.z2), 0.05, 0.18, form="arccse")
    assert torch.allclose(got, torch.tensor(ref, dtype=DT), atol=TOL)
    # the near-duplicate entry really is ineligible (theta < m), so both branches are covered
    assert math.acos(cos(rows(st.z1)[1], rows(st.z2)[0])) < 0.18



def test_adapacse_without_teacher_is_fixed_margin():
    st, _ = batch(seed=24)
    P1, P2, V = rows(st.p1), rows(st.p2), rows(st.v)
    ref = sum(ref_ce(ref_arcsim(P, V, 0.05, 0.2)) for P in (P1, P2)) / 2
    assert close(adapacse_loss(st.p1, st.p2, st.v, None, 0.2), ref)


# ===================================================================== gradients and NaN
def test_gradcheck_angular_margin_logits():
    st, te = batch(bs=4, d=3, g=3, seed=20)
    vv = torch.tensor(ref_cos_matrix(rows(te.image), rows(te.image)), dtype=DT)
    z1, z2 = st.z1.clone().requires_grad_(), st.z2.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, b: angular_margin_logits(a, b, 0.05, 0.18, vv[:, :]), (z1, z2)
    )


def test_identical_views_give_finite_gradients():
    # exact unit vectors: cos = 1 exactly on the diagonal, and -1 for an antipodal pair
    e = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]], dtype=DT)
    # the official formula (clamp then acos, no epsilon) gives NaN here: the failure guarded against
    naive = e.clone().requires_grad_()
    c = (
        torch.nn.functional.normalize(naive, dim=-1)
        @ torch.nn.functional.normalize(naive, dim=-1).t()
    )
    torch.cos(torch.acos(torch.clamp(c, -1, 1)) - 0.1).sum().backward()
    assert torch.isnan(naive.grad).any()
    x = e.clone().requires_grad_()
    angular_margin_logits(x, x, 0.05, 0.15).sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("batched", [False, True])
def test_safe_acos_is_the_clamped_acos_with_the_written_derivative(batched):
    """The value is the official acos(clamp(x, -1, 1)); the gradient is g * -1/sqrt(max(1 - x^2,
    1e-12)) inside [-1, 1] and 0 outside, also under vmap (how an array's members run it)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.tensor([-1.0, 1.0, 1.0 + 1e-7, -1.0 - 1e-6, 0.0, 0.999999]),
                   torch.rand(58, generator=gen) * 2.2 - 1.1]).to(torch.float32).view(4, 16)
    g = torch.randn(4, 16, generator=gen)
    leaf = x.clone().requires_grad_()
    y = torch.func.vmap(safe_acos)(leaf) if batched else safe_acos(leaf)
    y.backward(g)
    assert torch.equal(y.detach(), torch.acos(x.clamp(-1.0, 1.0)))
    d = -torch.rsqrt((1.0 - x * x).clamp_min(1e-12))
    want = torch.where(x.abs() <= 1.0, g * d, torch.zeros_like(g))
    assert torch.equal(leaf.grad, want)
    assert torch.isfinite(leaf.grad).all() and (leaf.grad[x.abs() > 1.0] == 0).all()
