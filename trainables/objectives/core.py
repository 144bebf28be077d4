"""Loss pieces shared by SimCSE, MCSE, KDMCSE and DALR, as pure functions of tensors (torch only).

Why: the official repos compute their objectives inside ``nn.Module``s, spread over model code,
collators and hard-coded weights (docs/official-code.md §3-§6). Here every term is one function, so
it can be checked against loop references (tests/trainables/objectives/) and composed by a config
(``trainables.objectives.composition``).

Conventions: rows are anchors, positives on the diagonal; matrix functions take (bs, d) tensors
and build (bs, bs) matrices. Defaults follow the official code exactly, quirks included; where a
paper reads differently a keyword gives the paper's reading. Teacher-side matrices (frozen CLIP or
text-teacher similarities) are computed without autocast in at least float32 and without gradient,
as the official collator and ``no_grad`` blocks do.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

FALSE_NEGATIVE_BIAS = -99999.99
"""KDMCSE collator constant added to filtered logits (train_mix.py)."""
_ACOS_GRAD_EPS = 1e-12
"""floor of 1 - x^2 in the acos derivative: finite gradients where |cos| reaches 1."""


# ------------------------------------------------------------------------------ basic pieces
def safe_acos(x: torch.Tensor) -> torch.Tensor:
    """acos(clamp(x, -1, 1)) with the official values, but a finite derivative at |x| = 1.

    The official ``torch.acos(torch.clamp(c, -1, 1))`` has an infinite derivative at |c| = 1, and
    with the zero factor of the outer cos it yields NaN (identical views). The derivative here is
    -1/sqrt(max(1 - x^2, 1e-12)) inside [-1, 1] and 0 outside (as the clamp gives).

    Plain operators, not an ``autograd.Function``: the detached acos plus ``(x - x.detach())``
    (exactly 0) times the detached derivative, whose gradient is that derivative times the
    incoming one. An array runs this under ``torch.func.vmap`` for all the members of a method,
    where a custom Function's vmap rule is generated at every call (2.5x the host time of this
    form); values and gradients are the same (``tests/trainables/objectives/test_core.py``).
    """
    xd = x.detach()
    slope = torch.where(xd.abs() <= 1.0, torch.rsqrt((1.0 - xd * xd).clamp_min(_ACOS_GRAD_EPS)), 0.0)
    # acos - 0 * slope, in one kernel; its gradient is -slope times the incoming one
    return torch.addcmul(torch.acos(xd.clamp(-1.0, 1.0)), x - xd, slope, value=-1.0)


def is_zero(x: float | torch.Tensor) -> bool:
    """``x == 0`` for a setting that switches a branch (a margin of 0 is plain InfoNCE).

    A tensor setting is never 0: an array batches the members of one method with their differing
    settings as tensors with a member axis, and keeps a member whose setting is 0 apart from one
    whose setting is not (``trainables.arrays.batched``)."""
    return not isinstance(x, torch.Tensor) and x == 0


class PreDrawn:
    """Random row permutations drawn ahead from a member's own generator, passed as a loss's
    ``generator`` when its members run as one batched computation (a ``torch.Generator`` cannot
    be used under ``torch.func.vmap``). :func:`row_permutation` takes them in order."""

    def __init__(self, perms: torch.Tensor | None):
        self.perms, self.used = perms, 0

    def next(self, n: int) -> torch.Tensor:
        if self.perms is None or self.used >= self.perms.shape[0]:
            raise TypeError("this loss draws more row permutations than its method's "
                            "Needs.permutations declares")
        p = self.perms[self.used]
        self.used += 1
        if p.shape[0] != n:
            raise ValueError(f"a permutation of {p.shape[0]} rows was drawn for a batch of {n}")
        return p


def row_permutation(n: int, generator: torch.Generator | PreDrawn | None,
                    device: torch.device) -> torch.Tensor:
    """``torch.randperm(n)`` from ``generator`` (default: the global CPU RNG), on ``device``; or
    the next permutation an array drew ahead (:class:`PreDrawn`)."""
    if isinstance(generator, PreDrawn):
        return generator.next(n)
    gen_device = generator.device if generator is not None else "cpu"
    return torch.randperm(n, generator=generator, device=gen_device).to(device, non_blocking=True)


def at_least_f32(x: torch.Tensor) -> torch.Tensor:
    """At least float32: logits are cos/0.05, so bf16 cosines would be 20x amplified noise."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def frozen(x: torch.Tensor) -> torch.Tensor:
    """Teacher tensor: detached, at least float32 (bf16/fp16 features would also tie ranks)."""
    return at_least_f32(x.detach())


def no_autocast(x: torch.Tensor):
    """Context that switches autocast off on x's device (loss matrices stay in >= float32)."""
    return torch.autocast(x.device.type, enabled=False)


def cosine_matrix(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(bs_x, bs_y) cosines cos(x_i, y_j), as ``nn.CosineSimilarity(dim=-1)`` on broadcast rows.

    Computed in at least float32 with autocast off, whatever the caller's precision.
    """
    if x.dim() != 2 or y.dim() != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(
            f"cosine_matrix needs (n, d) and (m, d) tensors, got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    with no_autocast(x):
        x, y = at_least_f32(x), at_least_f32(y)
        return F.normalize(x, dim=-1, eps=1e-8) @ F.normalize(y, dim=-1, eps=1e-8).t()


def frozen_cosine(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Teacher-side cosine matrix: no gradient, no autocast, at least float32."""
    return cosine_matrix(frozen(x), frozen(y))


def frozen_dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Teacher-side raw dot products x_i . y_j (KDMCSE's vc/cv scores): no gradient, no autocast."""
    with no_autocast(x):
        return frozen(x) @ frozen(y).t()


def diagonal_cross_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Mean over rows of CE(logits_i, target i): ``nn.CrossEntropyLoss()(logits, arange(bs))``."""
    return F.cross_entropy(logits, torch.arange(logits.shape[0], device=logits.device))


# ----------------------------------------------------------------------- SimCSE and margins
def simcse_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """Unsupervised SimCSE InfoNCE, z1 -> z2 only: mean_i CE([cos(z1_i, z2_j)/tau]_j, i).

    SimCSE (Gao et al. 2021) Eq. 1; docs/official-code.md §3.
    """
    return diagonal_cross_entropy(cosine_matrix(z1, z2) / temperature)


def angular_margin_logits(
    x: torch.Tensor,
    y: torch.Tensor,
    temperature: float,
    margin: float,
    teacher_similarity: torch.Tensor | None = None,
    *,
    form: str = "code",
) -> torch.Tensor:
    """KDMCSE's ArcSim logits (``ArcSimilarity.calculate_arccos2``; docs/official-code.md §5.2).

    theta_ij = arccos(clamp(cos(x_i, y_j), -1, 1)). ``form``:

    - ``"code"`` (default): off-diagonal entries with theta_ij > margin (plain margin) get
      theta_ij - margin * (1 - s_ij), s = ``teacher_similarity`` (Delta = 1 - s; Delta = 1 without a
      teacher); every other entry, the diagonal included, keeps cos(theta_ij).
    - ``"eq12"``: KDMCSE paper Eq. 12 as printed: every off-diagonal entry gets
      theta_ij - margin * |1 - s_ij|, with no theta > margin eligibility test.
    - ``"arccse"``: ArcCSE / KDMCSE Eq. 10: the positive gets cos(theta_ii + margin) unless
      theta_ii > pi - margin (``calculate_arccos1``, never called by the code); negatives plain.

    Returns logit_ij = cos(theta'_ij) / temperature. ``margin == 0`` gives plain cos/temperature.
    """
    if form not in ("code", "eq12", "arccse"):
        raise ValueError(f"form={form!r}; use 'code', 'eq12' or 'arccse'")
    c = cosine_matrix(x, y)
    if is_zero(margin):
        return c / temperature
    n, m = c.shape
    if n != m:
        raise ValueError(
            f"angular_margin_logits needs as many anchors as candidates, got {n} and {m}"
        )
    eye = torch.eye(n, dtype=torch.bool, device=c.device)
    theta = safe_acos(c)
    if form == "arccse":
        if teacher_similarity is not None:
            raise ValueError(
                "form='arccse' puts a fixed margin on the positive; pass teacher_similarity=None"
            )
        moved = eye & (theta <= math.pi - margin)
        shifted = theta + margin
    else:
        if teacher_similarity is None:
            delta = torch.ones_like(c)
        else:
            if teacher_similarity.shape != c.shape:
                raise ValueError(
                    f"teacher_similarity has shape {tuple(teacher_similarity.shape)}, logits {tuple(c.shape)}"
                )
            s = teacher_similarity.detach().to(theta.dtype)
            delta = 1.0 - s if form == "code" else (1.0 - s).abs()
        moved = ~eye if form == "eq12" else ~eye & (theta > margin)
        shifted = theta - margin * delta
    # Unmoved entries are clamp(c) = cos(acos(clamp(c))) exactly, without the acos gradient.
    return torch.where(moved, torch.cos(shifted), c.clamp(-1.0, 1.0)) / temperature


def threshold_bias(scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """KDMCSE false-negative filter as an additive logit bias (collator; paper Eq. 8-9, 13).

    -99999.99 where scores_ij > threshold and i != j, else 0; added after the temperature and
    the margin, so a filtered negative leaves the softmax denominator and the diagonal never does.
    """
    n = scores.shape[0]
    off = ~torch.eye(n, scores.shape[1], dtype=torch.bool, device=scores.device)
    hit = (scores > threshold) & off
    return torch.zeros_like(scores).masked_fill(hit, FALSE_NEGATIVE_BIAS)


# ------------------------------------------------------------------------- grounding terms
def adapacse_loss(
    p1: torch.Tensor,
    p2: torch.Tensor,
    targets: torch.Tensor,
    teacher_similarity: torch.Tensor | None,
    margin: float,
    temperature: float = 0.05,
    *,
    bias: torch.Tensor | None = None,
    form: str = "code",
    reduce_views: str = "mean",
) -> torch.Tensor:
    """One grounding term over both dropout views: 1/2 sum_a CE(ArcSim(p_a, targets) + bias).

    KDMCSE AdapACSE (paper Eq. 12-13, ``MCSE.compute_loss``); with ``margin=0`` and no bias it is
    MCSE's sentence->image InfoNCE. ``reduce_views="sum"`` adds the two views (MCSE paper's l^M).
    """
    if reduce_views not in ("mean", "sum"):
        raise ValueError(f"reduce_views={reduce_views!r}; use 'mean' or 'sum'")
    total = 0.0
    for p in (p1, p2):
        logits = angular_margin_logits(
            p, targets, temperature, margin, teacher_similarity, form=form
        )
        total = total + diagonal_cross_entropy(logits if bias is None else logits + bias)
    return total / 2 if reduce_views == "mean" else total


def mcse_grounding_loss(
    p1: torch.Tensor,
    p2: torch.Tensor,
    v: torch.Tensor,
    temperature: float = 0.05,
    *,
    reduce_views: str = "mean",
) -> torch.Tensor:
    """MCSE L_MM = 1/2 [CE(cos(p1_i, v_j)/tau) + CE(cos(p2_i, v_j)/tau)], sentence->image only.

    MCSE (Zhang et al. 2022) l^M; the code averages the two views (docs/official-code.md §4.2),
    the paper sums them (``reduce_views="sum"``).
    """
    return adapacse_loss(p1, p2, v, None, 0.0, temperature, reduce_views=reduce_views)
