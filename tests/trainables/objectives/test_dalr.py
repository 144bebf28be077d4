"""trainables.objectives.dalr: DALR's terms against hand cases and the loop references."""

from __future__ import annotations

import math

import torch

from tests.trainables.objectives.references import (
    DT,
    TOL,
    batch,
    close,
    ref_arcsim,
    ref_consistency,
    ref_cos_matrix,
    ref_g2l,
    ref_kl,
    ref_listmle,
    ref_weighted,
    rows,
    transpose,
)
from trainables.objectives.core import angular_margin_logits
from trainables.objectives.dalr import (
    dalr_cma_loss,
    dalr_consistency_loss,
    dalr_global_local_loss,
    dalr_ima_loss,
    dalr_teacher_embedding,
    dalr_teacher_local,
    dalr_teacher_scores,
    listmle_loss,
)


# ============================================================================== hand cases
def test_consistency_hand_case():
    t = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=DT)
    v = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=DT)
    # matched: 1 - 1 = 0, 1 - 1/sqrt2; rolled by 1: t0 vs v1 = [1,1]: max(0, 1/sqrt2 - 0.2),
    # t1 vs v0 = [1,0]: max(0, 0 - 0.2) = 0; mean over 4
    expect = (0 + (1 - 2**-0.5) + (2**-0.5 - 0.2) + 0) / 4
    assert close(dalr_consistency_loss(t, v, 0.2, shift=1), expect)


def test_listmle_hand_case():
    s = torch.tensor([[1.0, 0.0]], dtype=DT)
    eps = 1e-7
    # teacher order (0, 1): shifted scores [0, -1]; tails 1 + e^-1, e^-1
    a = math.log(1 + math.exp(-1) + eps) - 0 + math.log(math.exp(-1) + eps) + 1
    assert close(listmle_loss(s, torch.tensor([[0.9, 0.1]], dtype=DT)), a, 1e-12)
    # teacher order (1, 0): shifted scores [-1, 0]; tails e^-1 + 1, 1
    b = math.log(1 + math.exp(-1) + eps) + 1 + math.log(1 + eps) - 0
    assert close(listmle_loss(s, torch.tensor([[0.1, 0.9]], dtype=DT)), b, 1e-12)


def test_g2l_hand_case():
    # one token per sentence, token-axis norm of a single token -> 1; z = 0.1, 0.2, tau 1:
    # sentence 0: pos 0.1, negative 0.1 -> log 2; sentence 1: pos 0.2, negative 0.2 -> log 2
    local = torch.tensor([[[2.0]], [[3.0]]], dtype=DT)
    z = torch.tensor([[0.1], [0.2]], dtype=DT)
    out = dalr_global_local_loss(local, z, torch.ones(2, 1), temperature=1.0)
    assert close(out, math.log(2), 1e-12)


# ======================================================================= parity with loops
def test_dalr_terms_parity():
    st, te = batch(seed=5)
    Z1, Z2, img = rows(st.z1), rows(st.z2), rows(te.image)
    w = (0.33, 0.67)
    T1, T2 = (rows(t) for t in te.text_teachers)
    FT = ref_weighted([T1, T2], w)
    TT, VV = ref_cos_matrix(FT, FT), ref_cos_matrix(img, img)
    S = ref_arcsim(Z1, img, 0.05, 0.18)
    cma = (ref_kl(transpose(S), VV) + ref_kl(S, TT)) / 2
    assert close(dalr_cma_loss(st.z1, te.image, dalr_teacher_embedding(te.text_teachers, w)), cma)
    Szz = ref_arcsim(Z1, Z2, 0.05, 0.18)
    assert close(
        dalr_ima_loss(st.z1, st.z2, dalr_teacher_embedding(te.text_teachers, w)), ref_kl(Szz, TT)
    )
    ST = ref_weighted([[[c / 0.05 for c in r] for r in ref_cos_matrix(T, T)] for T in (T1, T2)], w)
    assert torch.allclose(
        dalr_teacher_scores(te.text_teachers, w), torch.tensor(ST, dtype=DT), atol=TOL
    )
    got = listmle_loss(torch.tensor(Szz, dtype=DT), dalr_teacher_scores(te.text_teachers, w))
    assert close(got, ref_listmle(Szz, ST))
    assert close(
        dalr_consistency_loss(st.text_aligned, st.image_aligned),
        ref_consistency(rows(st.text_aligned), rows(st.image_aligned)),
    )
    # Local_T elementwise: 0.33 * local1 + 0.67 * local2
    L1, L2 = rows(te.text_teacher_local[0]), rows(te.text_teacher_local[1])
    local = [
        [
            [w[0] * a + w[1] * b for a, b in zip(t1, t2, strict=True)]
            for t1, t2 in zip(s1, s2, strict=True)
        ]
        for s1, s2 in zip(L1, L2, strict=True)
    ]
    lt = dalr_teacher_local(te.text_teacher_local, w)
    assert torch.allclose(lt, torch.tensor(local, dtype=DT), atol=1e-12)
    mask = rows(st.attention_mask[:, 1:])
    for norm in ("tokens", "features"):
        got = dalr_global_local_loss(lt, st.z1, st.attention_mask[:, 1:], normalize=norm)
        assert close(got, ref_g2l(local, Z1, mask, 0.05, norm))


def test_listmle_ties_use_the_generator():
    s = torch.tensor([[0.3, -1.2, 2.0]], dtype=DT)
    tied = torch.zeros(1, 3, dtype=DT)
    a = listmle_loss(s, tied, generator=torch.Generator().manual_seed(4))
    b = listmle_loss(s, tied, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b)
    # with a fully tied teacher the order is the permutation: the value is one of the 3! orders
    import itertools

    values = [
        ref_listmle([[s[0, j].item() for j in p]], [[3.0, 2.0, 1.0]])
        for p in itertools.permutations(range(3))
    ]
    assert any(close(a, v, 1e-12) for v in values)


# ============================================================================== gradients
def test_gradcheck_terms():
    st, te = batch(bs=4, d=3, g=3, seed=20)
    z1, z2 = st.z1.clone().requires_grad_(), st.z2.clone().requires_grad_()
    ft = dalr_teacher_embedding(te.text_teachers, (0.33, 0.67))
    assert torch.autograd.gradcheck(lambda a: dalr_cma_loss(a, te.image, ft), (z1,))
    assert torch.autograd.gradcheck(lambda a, b: dalr_ima_loss(a, b, ft), (z1, z2))
    st_scores = dalr_teacher_scores(te.text_teachers, (0.33, 0.67))
    assert torch.autograd.gradcheck(
        lambda a, b: listmle_loss(
            angular_margin_logits(a, b, 0.05, 0.18),
            st_scores,
            generator=torch.Generator().manual_seed(0),
        ),
        (z1, z2),
    )
    ta, ia = st.text_aligned.clone().requires_grad_(), st.image_aligned.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: dalr_consistency_loss(a, b, shift=1), (ta, ia))
    local = dalr_teacher_local(tuple(x[:, :, :3] for x in te.text_teacher_local), (0.33, 0.67))
    mask = st.attention_mask[:4, 1:]
    assert torch.autograd.gradcheck(lambda a: dalr_global_local_loss(local, a, mask), (z1,))

