"""Loss terms and compositions of trainables.objectives against independent references.

The references below are plain-python double loops written from methods.md (§1, §2.2, §3.2,
§4.2) and papers.md, on lists of floats; they share no code with the implementation. Hand cases
carry their arithmetic in comments.
"""

from __future__ import annotations

import math

import pytest
import torch

from trainables.objectives import (
    ObjectiveConfig,
    StudentOutputs,
    TeacherInputs,
    adapacse_loss,
    angular_margin_logits,
    compute_objective,
    dalr_cma_loss,
    dalr_consistency_loss,
    dalr_global_local_loss,
    dalr_ima_loss,
    dalr_teacher_embedding,
    dalr_teacher_local,
    dalr_teacher_scores,
    kdmcse_grounding_loss,
    listmle_loss,
    mcse_grounding_loss,
    simcse_loss,
    threshold_bias,
)

TOL = 1e-6
DT = torch.float64


# ============================================================== loop references (plain python)
def dot(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def cos(a, b):
    return dot(a, b) / math.sqrt(dot(a, a) * dot(b, b))


def rows(t):
    return t.detach().tolist()


def ref_cos_matrix(X, Y):
    return [[cos(x, y) for y in Y] for x in X]


def ref_arcsim(X, Y, tau, m, S=None, form="code"):
    """methods.md §3.2.1: theta = acos(c); (i != j and theta > m) -> theta - m * (1 - s)."""
    out = []
    for i, x in enumerate(X):
        row = []
        for j, y in enumerate(Y):
            c = cos(x, y)
            theta = math.acos(max(-1.0, min(1.0, c)))
            if form == "code" and i != j and theta > m:
                theta = theta - m * ((1 - S[i][j]) if S is not None else 1.0)
            elif form == "eq12" and i != j:
                theta = theta - m * (abs(1 - S[i][j]) if S is not None else 1.0)
            elif form == "arccse" and i == j and theta <= math.pi - m:
                theta = theta + m
            row.append(math.cos(theta) / tau)
        out.append(row)
    return out


def ref_ce(logits):
    """mean_i [ -logit_ii + log sum_j exp(logit_ij) ]."""
    total = 0.0
    for i, row in enumerate(logits):
        mx = max(row)
        total += -row[i] + mx + math.log(sum(math.exp(v - mx) for v in row))
    return total / len(logits)


def add(A, B):
    return [[a + b for a, b in zip(ra, rb, strict=True)] for ra, rb in zip(A, B, strict=True)]


def ref_bias(scores, thr):
    return [
        [-99999.99 if (i != j and s > thr) else 0.0 for j, s in enumerate(r)]
        for i, r in enumerate(scores)
    ]


def ref_softmax(row, t):
    mx = max(v / t for v in row)
    e = [math.exp(v / t - mx) for v in row]
    return [x / sum(e) for x in e]


def ref_kl(student, teacher, ts=0.45, tt=0.5):
    """sum_ij P_ij (log P_ij - log Q_ij) / bs, P = softmax(teacher/tt), Q = softmax(student/ts)."""
    total = 0.0
    for s_row, t_row in zip(student, teacher, strict=True):
        p, q = ref_softmax(t_row, tt), ref_softmax(s_row, ts)
        total += sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q, strict=True))
    return total / len(student)


def transpose(A):
    return [list(r) for r in zip(*A, strict=True)]


def ref_listmle(student, teacher, eps=1e-7):
    """Each row in descending teacher order; loss = sum_k log(sum_{l>=k} e^{s_l - M} + eps) - (s_k - M)."""
    total = 0.0
    for s_row, t_row in zip(student, teacher, strict=True):
        order = sorted(range(len(t_row)), key=lambda j: -t_row[j])
        M = max(s_row)
        s = [s_row[j] - M for j in order]
        total += sum(math.log(sum(math.exp(v) for v in s[k:]) + eps) - s[k] for k in range(len(s)))
    return total / len(student)


def ref_consistency(T, V, margin=0.2, shift=5):
    """CosineEmbeddingLoss over (t_i, v_i, +1) and (t_i, v_{(i - shift) mod n}, -1), mean of 2n."""
    n = len(T)
    terms = [1 - cos(T[i], V[i]) for i in range(n)]
    terms += [max(0.0, cos(T[i], V[(i - shift) % n]) - margin) for i in range(n)]
    return sum(terms) / (2 * n)


def ref_g2l(local, z, mask, tau=0.05, normalize="tokens"):
    """methods.md §4.2 L_g2l, one sentence i and token k at a time."""
    n, K, d = len(local), len(local[0]), len(local[0][0])
    if normalize == "tokens":  # norm over the token axis, per sentence and feature
        norms = [
            [math.sqrt(sum(local[i][k][f] ** 2 for k in range(K))) for f in range(d)]
            for i in range(n)
        ]
        L = [[[local[i][k][f] / norms[i][f] for f in range(d)] for k in range(K)] for i in range(n)]
    else:
        L = [[[x / math.sqrt(dot(v, v)) for x in v] for v in sent] for sent in local]
    total = 0.0
    for i in range(n):
        negs = [
            dot(L[j][kk], z[i]) / tau if (j != i and mask[j][kk]) else -10000.0
            for j in range(n)
            for kk in range(K)
        ]
        s = 0.0
        for k in range(K):
            pos = dot(L[i][k], z[i]) / tau if mask[i][k] else 10000.0
            allv = [pos] + negs
            mx = max(allv)
            s += -(pos - mx - math.log(sum(math.exp(v - mx) for v in allv)))
        total += s / sum(mask[i])
    return total / n


def ref_weighted(mats, w):
    out = [[0.0] * len(mats[0][0]) for _ in mats[0]]
    for m, wk in zip(mats, w, strict=True):
        out = [
            [o + wk * x for o, x in zip(ro, rx, strict=True)] for ro, rx in zip(out, m, strict=True)
        ]
    return out


# ============================================================================== fixtures
def randn(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=DT)


def batch(bs=7, d=6, g=4, seed=0, dv=None):
    """A float64 batch with a near-duplicate pair (theta < margin) so eligibility is exercised."""
    z1, z2 = randn(bs, d, seed=seed), randn(bs, d, seed=seed + 1)
    z2[0] = z1[1] + 1e-3 * randn(d, seed=seed + 2)  # cos(z1_1, z2_0) ~ 1: not eligible
    p1, p2 = randn(bs, g, seed=seed + 3), randn(bs, g, seed=seed + 4)
    v, t = randn(bs, g, seed=seed + 5), randn(bs, g, seed=seed + 6)
    p2[2] = v[3] + 1e-3 * randn(g, seed=seed + 7)
    image = randn(bs, dv or d, seed=seed + 8) * 0.6
    clip_text = image + 0.5 * randn(bs, dv or d, seed=seed + 9)
    mask = torch.ones(bs, 5, dtype=torch.long)
    mask[0, 3:] = 0
    mask[2, 4:] = 0
    student = StudentOutputs(
        z1=z1,
        z2=z2,
        p1=p1,
        p2=p2,
        v=v,
        t=t,
        text_aligned=randn(bs, 3, seed=seed + 10),
        image_aligned=randn(bs, 3, seed=seed + 11).abs(),
        attention_mask=mask,
    )
    teacher = TeacherInputs(
        image=image,
        clip_text=clip_text,
        text_teachers=(randn(bs, 5, seed=seed + 12), randn(bs, 5, seed=seed + 13)),
        text_teacher_local=(randn(bs, 4, d, seed=seed + 14), randn(bs, 4, d, seed=seed + 15)),
    )
    return student, teacher


def close(a, b, tol=TOL):
    return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b)))


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


@pytest.mark.parametrize("threshold_on", ["dot", "cosine"])
def test_kdmcse_grounding_parity(threshold_on):
    st, te = batch(seed=3)
    P1, P2, V, T = rows(st.p1), rows(st.p2), rows(st.v), rows(st.t)
    img, txt = rows(te.image), rows(te.clip_text)
    vv, cc = ref_cos_matrix(img, img), ref_cos_matrix(txt, txt)
    if threshold_on == "dot":  # raw dot products, as the collator pairs them
        cv = [[dot(txt[i], img[j]) for j in range(7)] for i in range(7)]
        vc = [[dot(img[i], txt[j]) for j in range(7)] for i in range(7)]
    else:
        cv, vc = ref_cos_matrix(txt, img), ref_cos_matrix(img, txt)
    thr = 0.3
    bv, bt = ref_bias(cv, thr), ref_bias(vc, thr)
    n_masked = sum(v != 0 for r in bv for v in r)
    assert 0 < n_masked < 42  # the filter does something, but not everything
    lv = (
        ref_ce(add(ref_arcsim(P1, V, 0.05, 0.15, vv), bv))
        + ref_ce(add(ref_arcsim(P2, V, 0.05, 0.15, vv), bv))
    ) / 2
    lt = (
        ref_ce(add(ref_arcsim(P1, T, 0.05, 0.15, cc), bt))
        + ref_ce(add(ref_arcsim(P2, T, 0.05, 0.15, cc), bt))
    ) / 2
    got = kdmcse_grounding_loss(
        st.p1, st.p2, st.v, st.t, te.image, te.clip_text, 0.15, thr, 0.05, threshold_on=threshold_on
    )
    assert close(got, lv + lt)
    # no threshold, no text term, adaptive off
    lv0 = (
        ref_ce(ref_arcsim(P1, V, 0.05, 0.15, vv)) + ref_ce(ref_arcsim(P2, V, 0.05, 0.15, vv))
    ) / 2
    assert close(kdmcse_grounding_loss(st.p1, st.p2, st.v, None, te.image, None), lv0)
    plain = (ref_ce(ref_arcsim(P1, V, 0.05, 0.0)) + ref_ce(ref_arcsim(P2, V, 0.05, 0.0))) / 2
    assert close(
        kdmcse_grounding_loss(st.p1, st.p2, st.v, None, te.image, None, adaptive_margin=False),
        plain,
    )
    assert close(mcse_grounding_loss(st.p1, st.p2, st.v), plain)


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


# ============================================================================ composition
def test_resolved_defaults():
    r = {m: ObjectiveConfig(method=m).resolved() for m in ("simcse", "mcse", "kdmcse", "dalr")}
    assert (r["mcse"].lam, r["kdmcse"].lam, r["dalr"].lam) == (0.01, 0.01, 0.1)
    assert (r["dalr"].mu, r["mcse"].mu) == (0.2, 0.0)
    assert (
        r["kdmcse"].text_margin,
        r["dalr"].text_margin,
        r["mcse"].text_margin,
        r["simcse"].text_margin,
    ) == (0.15, 0.18, 0.0, 0.0)
    assert (
        r["kdmcse"].grounding_margin,
        r["dalr"].grounding_margin,
        r["mcse"].grounding_margin,
    ) == (0.15, 0.18, 0.0)
    assert (r["kdmcse"].clip_text_term, r["mcse"].clip_text_term, r["dalr"].clip_text_term) == (
        True,
        False,
        False,
    )
    assert ObjectiveConfig(method="kdmcse", lam=0.5).resolved().lam == 0.5
    assert r["dalr"].resolved() == r["dalr"]  # idempotent


@pytest.mark.parametrize(
    "change, words",
    [
        ({"method": "infocse"}, "unknown objective method"),
        ({"temperature": -0.05}, "temperature"),
        ({"temperature_vl": 0.0}, "temperature_vl"),
        ({"method": "kdmcse", "text_margin": math.pi}, "text_margin"),
        ({"method": "kdmcse", "grounding_margin": -0.1}, "grounding_margin"),
        ({"lam": -1.0}, "lam"),
        ({"method": "dalr", "threshold": 0.8}, "threshold"),
        ({"method": "dalr", "clip_text_term": True}, "clip_text_term"),
        ({"threshold_on": "l2"}, "threshold_on"),
        ({"teacher_weights": ()}, "teacher_weights"),
        ({"consistency_margin": 2.0}, "consistency_margin"),
        ({"g2l_normalize": "rows"}, "g2l_normalize"),
    ],
)
def test_config_validation(change, words):
    with pytest.raises(ValueError, match=words) as err:
        ObjectiveConfig(**change).resolved()
    assert "\n" not in str(err.value)


def test_text_batch_and_simcse():
    st, te = batch(seed=7)
    Z1, Z2 = rows(st.z1), rows(st.z2)
    for method, m in (("simcse", 0.0), ("mcse", 0.0), ("kdmcse", 0.15), ("dalr", 0.18)):
        out = compute_objective(ObjectiveConfig(method=method), st, None)
        assert set(out) == {"text", "total"}
        assert close(out["total"], ref_ce(ref_arcsim(Z1, Z2, 0.05, m)))
    out = compute_objective(ObjectiveConfig(method="simcse"), st, te)  # captions are just text
    assert set(out) == {"text", "total"} and close(
        out["total"], ref_ce(ref_arcsim(Z1, Z2, 0.05, 0.0))
    )


def test_mcse_total():
    st, te = batch(seed=8)
    P1, P2, V = rows(st.p1), rows(st.p2), rows(st.v)
    g = (ref_ce(ref_arcsim(P1, V, 0.05, 0.0)) + ref_ce(ref_arcsim(P2, V, 0.05, 0.0))) / 2
    text = ref_ce(ref_arcsim(rows(st.z1), rows(st.z2), 0.05, 0.0))
    out = compute_objective(ObjectiveConfig(method="mcse"), st, te)
    assert set(out) == {"text", "grounding_image", "inter", "total"}
    assert close(out["total"], text + 0.01 * g)
    out = compute_objective(ObjectiveConfig(method="mcse", paper_reading=True), st, te)
    assert close(out["total"], text + 0.01 * 2 * g)  # paper l^M sums the views


def kdmcse_ref(st, te, threshold=None, form="code"):
    P1, P2, V, T = rows(st.p1), rows(st.p2), rows(st.v), rows(st.t)
    img, txt = rows(te.image), rows(te.clip_text)
    vv, cc = ref_cos_matrix(img, img), ref_cos_matrix(txt, txt)
    zero = [[0.0] * 7 for _ in range(7)]
    bv = (
        ref_bias([[dot(a, b) for b in img] for a in txt], threshold)
        if threshold is not None
        else zero
    )
    bt = (
        ref_bias([[dot(a, b) for b in txt] for a in img], threshold)
        if threshold is not None
        else zero
    )
    lv = sum(ref_ce(add(ref_arcsim(P, V, 0.05, 0.15, vv, form), bv)) for P in (P1, P2)) / 2
    lt = sum(ref_ce(add(ref_arcsim(P, T, 0.05, 0.15, cc, form), bt)) for P in (P1, P2)) / 2
    return ref_ce(ref_arcsim(rows(st.z1), rows(st.z2), 0.05, 0.15)), lv, lt


def test_kdmcse_total_and_switches():
    st, te = batch(seed=9)
    text, lv, lt = kdmcse_ref(st, te)
    base = ObjectiveConfig(method="kdmcse")
    out = compute_objective(base, st, te)
    assert set(out) == {"text", "grounding_image", "grounding_text", "inter", "total"}
    assert close(out["grounding_image"], lv) and close(out["grounding_text"], lt)
    assert close(out["total"], text + 0.01 * (lv + lt))
    # threshold filtering (raw dot products; cv for the image term, vc for the text term)
    text, lv_t, lt_t = kdmcse_ref(st, te, threshold=0.3)
    out = compute_objective(base.replace(threshold=0.3), st, te)
    assert close(out["total"], text + 0.01 * (lv_t + lt_t)) and not close(lv_t, lv)
    # without AdapACSE: plain InfoNCE grounding (text margin stays)
    P1, P2, V = rows(st.p1), rows(st.p2), rows(st.v)
    plain_v = sum(ref_ce(ref_arcsim(P, V, 0.05, 0.0)) for P in (P1, P2)) / 2
    out = compute_objective(base.replace(adaptive_margin=False), st, te)
    assert close(out["grounding_image"], plain_v) and close(out["text"], text)
    # no CLIP-text term: removes exactly grounding_text
    out = compute_objective(base.replace(clip_text_term=False), st, te)
    assert "grounding_text" not in out and close(out["total"], text + 0.01 * lv)
    # paper reading: Eq. 12 negatives (no eligibility test) and inter averaged (Eq. 14)
    _, lv12, lt12 = kdmcse_ref(st, te, form="eq12")
    out = compute_objective(base.replace(paper_reading=True), st, te)
    assert close(out["total"], text + 0.01 * (lv12 + lt12) / 2)


def dalr_ref(st, te, paper=False):
    """methods.md §4.2 total, every term from the loop references."""
    w = (0.33, 0.67)
    Z1, Z2, img = rows(st.z1), rows(st.z2), rows(te.image)
    T1, T2 = (rows(t) for t in te.text_teachers)
    FT = ref_weighted([T1, T2], w)
    TT, VV = ref_cos_matrix(FT, FT), ref_cos_matrix(img, img)
    Szz = ref_arcsim(Z1, Z2, 0.05, 0.18)
    S = ref_arcsim(Z1, img, 0.05, 0.18)
    ST = ref_weighted([[[c / 0.05 for c in r] for r in ref_cos_matrix(T, T)] for T in (T1, T2)], w)
    L1, L2 = rows(te.text_teacher_local[0]), rows(te.text_teacher_local[1])
    local = [
        [
            [w[0] * a + w[1] * b for a, b in zip(t1, t2, strict=True)]
            for t1, t2 in zip(s1, s2, strict=True)
        ]
        for s1, s2 in zip(L1, L2, strict=True)
    ]
    P1, P2, V = rows(st.p1), rows(st.p2), rows(st.v)
    t = {
        "text": ref_ce(Szz),
        "consistency": ref_consistency(rows(st.text_aligned), rows(st.image_aligned)),
        "cma": (ref_kl(transpose(S), VV) + ref_kl(S, TT)) / 2,
        "info": sum(ref_ce(ref_arcsim(P, V, 0.05, 0.18, VV)) for P in (P1, P2)) / 2,
        "ima": ref_kl(Szz, TT),
        "rank": ref_listmle(Szz, ST),
        "g2l": ref_g2l(local, Z1, rows(st.attention_mask[:, 1:])),
    }
    return t


def dalr_total(t, on, paper=False):
    g = {k: (v if k in on else 0.0) for k, v in t.items()}
    if paper:
        return (
            g["text"]
            + g["info"]
            + 0.1 * (g["consistency"] + g["cma"])
            + 0.2 * (g["ima"] + g["rank"])
        )
    return (
        g["text"]
        + 0.1 * (0.01 * g["consistency"] + g["cma"] + g["info"])
        + 0.2 * (g["ima"] + g["rank"] + g["g2l"])
    )


SWITCHES = {
    "use_info": "info",
    "use_consistency": "consistency",
    "use_cma": "cma",
    "use_ima": "ima",
    "use_rank": "rank",
    "use_g2l": "g2l",
}


def test_dalr_total_and_each_switch():
    st, te = batch(seed=11)
    ref = dalr_ref(st, te)
    all_on = set(ref)
    out = compute_objective(ObjectiveConfig(method="dalr"), st, te)
    for k, v in ref.items():
        assert close(out[k], v), k
    assert close(out["total"], dalr_total(ref, all_on))
    for switch, term in SWITCHES.items():
        off = compute_objective(ObjectiveConfig(method="dalr", **{switch: False}), st, te)
        assert term not in off
        assert close(off["total"], dalr_total(ref, all_on - {term})), switch
    # w/o L_CML (cons + cma) and w/o L_IML (ima + rank) are two switches each
    off = compute_objective(
        ObjectiveConfig(method="dalr", use_consistency=False, use_cma=False), st, te
    )
    assert close(off["total"], dalr_total(ref, all_on - {"consistency", "cma"}))
    off = compute_objective(ObjectiveConfig(method="dalr", use_ima=False, use_rank=False), st, te)
    assert close(off["total"], dalr_total(ref, all_on - {"ima", "rank"}))


def test_dalr_paper_reading():
    st, te = batch(seed=12)
    ref = dalr_ref(st, te)
    out = compute_objective(ObjectiveConfig(method="dalr", paper_reading=True), st, te)
    assert "g2l" not in out
    assert close(out["total"], dalr_total(ref, set(ref), paper=True))
    assert close(out["cross"], ref["consistency"] + ref["cma"])
    assert close(out["intra"], ref["ima"] + ref["rank"])


def test_dalr_empty_local_gives_zero_g2l_and_resnet_needs_cma_off():
    st, te = batch(seed=13)
    te0 = TeacherInputs(image=te.image, clip_text=te.clip_text, text_teachers=te.text_teachers)
    out = compute_objective(ObjectiveConfig(method="dalr"), st, te0)
    assert out["g2l"].item() == 0.0
    ref = dalr_ref(st, te)
    assert close(out["total"], dalr_total(ref, set(ref) - {"g2l"}))
    st, te = batch(seed=13, dv=10)  # a "ResNet" feature: 10-d, student 6-d
    with pytest.raises(ValueError, match="use_cma=False"):
        compute_objective(ObjectiveConfig(method="dalr"), st, te)
    out = compute_objective(ObjectiveConfig(method="dalr", use_cma=False), st, te)
    assert torch.isfinite(out["total"])


def test_input_errors():
    st, te = batch(seed=14)
    bad = TeacherInputs(
        image=te.image, text_teachers=te.text_teachers[:1], text_teacher_local=te.text_teacher_local
    )
    with pytest.raises(ValueError, match="teacher_weights has 2"):
        compute_objective(ObjectiveConfig(method="dalr"), st, bad)
    none = TeacherInputs(image=te.image)
    with pytest.raises(ValueError, match="use_cma/use_ima/use_rank=False"):
        compute_objective(ObjectiveConfig(method="dalr"), st, none)
    st.t = None
    with pytest.raises(ValueError, match="StudentOutputs.t"):
        compute_objective(ObjectiveConfig(method="kdmcse"), st, te)
    with pytest.raises(ValueError, match="clip_text"):
        kdmcse_grounding_loss(st.p1, st.p2, st.v, None, te.image, None, threshold=0.5)


# ===================================================================== gradients and NaN
def test_gradcheck_terms():
    st, te = batch(bs=4, d=3, g=3, seed=20)
    vv = torch.tensor(ref_cos_matrix(rows(te.image), rows(te.image)), dtype=DT)
    z1, z2 = st.z1.clone().requires_grad_(), st.z2.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, b: angular_margin_logits(a, b, 0.05, 0.18, vv[:, :]), (z1, z2)
    )
    p1, p2, v, t = (x.clone().requires_grad_() for x in (st.p1, st.p2, st.v, st.t))
    assert torch.autograd.gradcheck(
        lambda a, b, c, d: kdmcse_grounding_loss(a, b, c, d, te.image, te.clip_text, threshold=0.3),
        (p1, p2, v, t),
    )
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


def test_gradcheck_composed_totals():
    st, te = batch(bs=4, d=3, g=2, seed=21)
    names = ("z1", "z2", "p1", "p2", "v", "t", "text_aligned", "image_aligned")
    leaves = tuple(getattr(st, n).clone().requires_grad_() for n in names)
    te = TeacherInputs(
        image=te.image,
        clip_text=te.clip_text,
        text_teachers=te.text_teachers,
        text_teacher_local=tuple(x[:, :, :3] for x in te.text_teacher_local),
    )
    for cfg in (ObjectiveConfig(method="kdmcse", threshold=0.3), ObjectiveConfig(method="dalr")):

        def f(*xs, cfg=cfg):
            s = StudentOutputs(
                **dict(zip(names, xs, strict=True)), attention_mask=st.attention_mask
            )
            return compute_objective(cfg, s, te, generator=torch.Generator().manual_seed(0))[
                "total"
            ]

        assert torch.autograd.gradcheck(f, leaves)


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
    st, te = batch(seed=22)
    for method in ("kdmcse", "dalr"):
        z = st.z1.clone().requires_grad_()
        p = st.p1.clone().requires_grad_()
        s = StudentOutputs(
            z1=z,
            z2=z,
            p1=p,
            p2=p,
            v=st.p1,
            t=st.p1,
            text_aligned=st.text_aligned,
            image_aligned=st.image_aligned,
            attention_mask=st.attention_mask,
        )
        out = compute_objective(ObjectiveConfig(method=method), s, te)
        out["total"].backward()
        assert (
            torch.isfinite(out["total"])
            and torch.isfinite(z.grad).all()
            and torch.isfinite(p.grad).all()
        )


def test_float32_and_autocast_run():
    st, te = batch(seed=23)
    s32 = StudentOutputs(
        **{
            k: (v.float() if v is not None and v.is_floating_point() else v)
            for k, v in vars(st).items()
        }
    )
    out64 = compute_objective(
        ObjectiveConfig(method="dalr"), st, te, generator=torch.Generator().manual_seed(1)
    )
    out32 = compute_objective(
        ObjectiveConfig(method="dalr"), s32, te, generator=torch.Generator().manual_seed(1)
    )
    assert abs(out32["total"].item() - out64["total"].item()) < 1e-4
    # under bf16 autocast the loss matrices stay float32: same value as without autocast
    cfg = ObjectiveConfig(method="kdmcse", threshold=0.3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        amp = compute_objective(cfg, s32, te)
    assert amp["total"].dtype != torch.bfloat16
    assert abs(amp["total"].item() - compute_objective(cfg, s32, te)["total"].item()) < 1e-5


def test_adapacse_without_teacher_is_fixed_margin():
    st, _ = batch(seed=24)
    P1, P2, V = rows(st.p1), rows(st.p2), rows(st.v)
    ref = sum(ref_ce(ref_arcsim(P, V, 0.05, 0.2)) for P in (P1, P2)) / 2
    assert close(adapacse_loss(st.p1, st.p2, st.v, None, 0.2), ref)
