"""Independent references for the objective tests: plain-python loops and a random batch.

The references are double loops written from docs/official-code.md (§3, §4.2, §5.2-§5.4, §6.3) and
the papers' equations, on lists of floats; they share no code with the implementation.
"""

from __future__ import annotations

import math

import torch

from trainables.objectives import StudentOutputs, TeacherInputs

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
    """docs/official-code.md §5.2: theta = acos(c); (i != j and theta > m) -> theta - m * (1 - s)."""
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
    """docs/official-code.md §6.3 L_g2l, one sentence i and token k at a time."""
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
