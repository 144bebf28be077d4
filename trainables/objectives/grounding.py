"""MCSE-style grounding, shared by MCSE and KDMCSE: the grounding terms as pure tensor functions,
their settings, heads, loss, description and store checks.

A caption batch's [CLS] goes through the grounding head (p1, p2, two dropout views) and is pulled
towards its own image's feature through the image head (v) against the batch's other images as
negatives; KDMCSE adds AdapACSE margins (Delta from the CLIP teacher's intra-modal cosines), a
second term L_t against the CLIP caption feature (t) and an optional false-negative filter
(docs/official-code.md §4.2, §5.3-§5.4). MCSE is the same with no margin, no L_t and no filter:
:mod:`trainables.objectives.mcse` and :mod:`trainables.objectives.kdmcse` differ only in their
settings' defaults and in how they sum the terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trainables.objectives.core import (
    adapacse_loss,
    angular_margin_logits,
    diagonal_cross_entropy,
    frozen_cosine,
    frozen_dot,
    is_zero,
    threshold_bias,
)
from trainables.objectives.methods import (
    ANGLE,
    Head,
    HeadDims,
    NegativeFilter,
    Settings,
    StoreView,
    StudentOutputs,
    TeacherInputs,
    need,
)
from trainables.runtime.checks import (
    FINITE,
    NON_NEGATIVE,
    POSITIVE,
    Choice,
    Flag,
    Optional,
    setting,
)


def kdmcse_grounding_terms(
    p1: torch.Tensor,
    p2: torch.Tensor,
    v: torch.Tensor,
    t: torch.Tensor | None,
    clip_image: torch.Tensor,
    clip_text: torch.Tensor | None,
    margin: float = 0.15,
    threshold: float | None = None,
    temperature: float = 0.05,
    *,
    adaptive_margin: bool = True,
    threshold_on: str = "dot",
    form: str = "code",
    reduce_views: str = "mean",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(L_v, L_t) of KDMCSE (docs/official-code.md §5.3-§5.4; paper Eq. 12-13), L_t None when t is None.

    L_v: AdapACSE of p1, p2 against v with Delta = 1 - cos(clip_image_i, clip_image_j).
    L_t: the same against t with Delta = 1 - cos(clip_text_i, clip_text_j).
    ``adaptive_margin=False``: plain InfoNCE (the paper's "without AdapACSE").
    ``threshold``: L_v's filter from cv_ij = clip_text_i . clip_image_j, L_t's from
    vc_ij = clip_image_i . clip_text_j, raw dot products of the stored, unnormalised features as
    the official collator pairs them; ``threshold_on="cosine"`` compares cosines (paper's reading).
    """
    if threshold_on not in ("dot", "cosine"):
        raise ValueError(f"threshold_on={threshold_on!r}; use 'dot' or 'cosine'")
    m = margin if adaptive_margin else 0.0
    need_text = t is not None and not is_zero(m) or threshold is not None
    if need_text and clip_text is None:
        raise ValueError(
            "KDMCSE's CLIP-text term and the threshold filter need clip_text (the stored CLIP caption feature)"
        )
    bias_v = bias_t = None
    if threshold is not None:
        score = frozen_dot if threshold_on == "dot" else frozen_cosine
        bias_v = threshold_bias(score(clip_text, clip_image), threshold)
        bias_t = threshold_bias(score(clip_image, clip_text), threshold)
    vv = None if is_zero(m) else frozen_cosine(clip_image, clip_image)
    lv = adapacse_loss(
        p1, p2, v, vv, m, temperature, bias=bias_v, form=form, reduce_views=reduce_views
    )
    if t is None:
        return lv, None
    cc = None if is_zero(m) else frozen_cosine(clip_text, clip_text)
    lt = adapacse_loss(
        p1, p2, t, cc, m, temperature, bias=bias_t, form=form, reduce_views=reduce_views
    )
    return lv, lt


def masked_fraction(clip_image: torch.Tensor, clip_text: torch.Tensor, threshold: float,
                    threshold_on: str = "dot") -> torch.Tensor:
    """Share of the off-diagonal negatives the threshold filter removes from L_v (cv scores;
    L_t's vc matrix is its transpose, so the share is the same). 1.0 means every negative is
    masked: both grounding terms are then exactly 0 and the member trains without grounding."""
    score = frozen_dot if threshold_on == "dot" else frozen_cosine
    s = score(clip_text, clip_image)
    n = s.shape[0]
    if n < 2:
        return s.new_zeros(())
    off = ~torch.eye(n, dtype=torch.bool, device=s.device)
    # A sum over a fixed mask, not s[off]: no data-dependent shape (a batched or captured step)
    return ((s > threshold) & off).sum().float() / (n * (n - 1))



@dataclass(frozen=True)
class GroundingSettings(Settings):
    """Settings of MCSE-style grounding (MCSE and KDMCSE; defaults here are KDMCSE's)."""

    temperature: float = setting(0.05, POSITIVE)
    """tau of the text-text InfoNCE (all repos: 0.05)"""
    temperature_vl: float = setting(0.05, POSITIVE)
    """tau' of the grounding terms (all repos: 0.05)"""
    lam: float = setting(0.01, NON_NEGATIVE)
    """lambda: weight of the grounding part (official 0.01)"""
    text_margin: float = setting(0.15, ANGLE)
    """m1: fixed angular margin on text-text negatives (KDMCSE 0.15; 0 = plain cosine)"""
    grounding_margin: float = setting(0.15, ANGLE)
    """m2: AdapACSE margin on grounding negatives (KDMCSE 0.15; 0 = plain InfoNCE)"""
    adaptive_margin: bool = setting(True, Flag())
    """AdapACSE on (Delta = 1 - teacher intra-modal cosine); off = plain InfoNCE grounding"""
    threshold: float | None = setting(None, Optional(FINITE))
    """false-negative filter value (off in the official scripts; score_base 0.8 when on)"""
    threshold_on: str = setting("dot", Choice(("dot", "cosine")))
    """'dot': raw dot products of stored CLIP features (code); 'cosine': cosines (paper's reading)"""
    clip_text_term: bool = setting(True, Flag())
    """KDMCSE's L_t over CLIP-text features (MCSE may opt in: KDMCSE Table 5)"""
    paper_reading: bool = setting(False, Flag())
    """True: the paper's formulas where they differ from the code (docs/official-code.md §8)"""



def grounding_loss(s: GroundingSettings, out: StudentOutputs, teacher: TeacherInputs, method: str,
                   *, form: str = "code", reduce_views: str = "mean",
                   average: bool = False) -> dict[str, torch.Tensor]:
    """text + lam * inter with inter = grounding_image (+ grounding_text with ``clip_text_term``),
    summed or, with ``average``, averaged (KDMCSE Eq. 14)."""
    text = diagonal_cross_entropy(angular_margin_logits(out.z1, out.z2, s.temperature, s.text_margin))
    p1, p2, v = need(out, f"{method} grounding", "p1", "p2", "v")
    t = need(out, "clip_text_term", "t")[0] if s.clip_text_term else None
    lv, lt = kdmcse_grounding_terms(
        p1, p2, v, t, teacher.image, teacher.clip_text, s.grounding_margin, s.threshold,
        s.temperature_vl, adaptive_margin=s.adaptive_margin, threshold_on=s.threshold_on,
        form=form, reduce_views=reduce_views,
    )
    terms = {"text": text, "grounding_image": lv}
    inter = lv
    if lt is not None:
        terms["grounding_text"] = lt
        inter = (lv + lt) / 2 if average else lv + lt
    terms["inter"] = inter
    terms["total"] = text + s.lam * inter
    return terms


def grounding_heads(s: GroundingSettings, dims: HeadDims, clip_text_in: int | None) -> dict[str, Head]:
    """MCSE's grounding head on [CLS] (p1, p2) and image head (v), plus a CLIP-text head (t) on
    ``clip_text_in``-d features when that is given (docs/official-code.md §4.1, §5.1)."""
    heads = {"grounding": Head("cls", dims.proj_dim, into=("p1", "p2")),
             "image_head": Head("image", dims.proj_dim, into=("v",))}
    if clip_text_in is not None:
        heads["clip_text_head"] = Head("clip_text", dims.proj_dim, into=("t",), in_dim=clip_text_in)
    return heads


def describe_grounding(name: str, s: GroundingSettings) -> dict[str, Any]:
    """The settings grounding really uses: the margin appears only where AdapACSE acts, the
    filter's only when it is on."""
    out: dict[str, Any] = {"method": name, "temperature": s.temperature,
                           "text_margin": s.text_margin, "lam": s.lam,
                           "temperature_vl": s.temperature_vl, **margin_settings(s),
                           "clip_text_term": s.clip_text_term}
    if s.threshold is not None:
        out.update(threshold=s.threshold, threshold_on=s.threshold_on)
    out["paper_reading"] = s.paper_reading
    return out


def margin_settings(s: Any) -> dict[str, Any]:
    """``adaptive_margin`` as it acts (on only with a margin > 0), and the margin only then."""
    if s.adaptive_margin and s.grounding_margin > 0:
        return {"adaptive_margin": True, "grounding_margin": s.grounding_margin}
    return {"adaptive_margin": False}


def grounding_filter(s: GroundingSettings) -> NegativeFilter | None:
    return None if s.threshold is None else NegativeFilter(s.threshold, s.threshold_on)


def check_grounding_store(s: GroundingSettings, store: StoreView) -> None:
    """The CLIP caption feature L_t and the filter read must be in the store, and the filter's
    dot products need both features from one CLIP model."""
    needs = [(what, fix) for on, what, fix in (
        (s.clip_text_term, "objective.clip_text_term (KDMCSE's L_t)", "objective.clip_text_term=false"),
        (s.threshold is not None, "the threshold filter", "objective.threshold=None"),
    ) if on]
    if needs and store.clip_text_dim is None:
        what, fix = needs[0]
        raise ValueError(
            f"{store.path} has no 'clip_text' column but {what} needs the stored CLIP caption "
            f"feature; convert a CLIP store (python -m trainables.convert clip-json) or set {fix}"
        )
    if s.threshold is not None and store.clip_text_dim != store.image_dim:
        raise ValueError(
            f"{store.path}: {store.image_column!r} features are {store.image_dim}-d but 'clip_text' is "
            f"{store.clip_text_dim}-d; the threshold filter takes clip_text . {store.image_column} dot "
            "products (docs/official-code.md §5.4), so both must come from one CLIP model: use such "
            "a store or set objective.threshold=None"
        )
