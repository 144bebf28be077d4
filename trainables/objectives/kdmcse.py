"""KDMCSE's two grounding terms (L_v, L_t) as a pure tensor function (torch only).

How they are combined (a sum in the code, an average in KDMCSE paper Eq. 14) is the composition's
business (``trainables.objectives.composition``), so it is written once.
"""

from __future__ import annotations

import torch

from trainables.objectives.core import adapacse_loss, frozen_cosine, frozen_dot, threshold_bias


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
    need_text = t is not None and m > 0 or threshold is not None
    if need_text and clip_text is None:
        raise ValueError(
            "KDMCSE's CLIP-text term and the threshold filter need clip_text (the stored CLIP caption feature)"
        )
    bias_v = bias_t = None
    if threshold is not None:
        score = frozen_dot if threshold_on == "dot" else frozen_cosine
        bias_v = threshold_bias(score(clip_text, clip_image), threshold)
        bias_t = threshold_bias(score(clip_image, clip_text), threshold)
    vv = frozen_cosine(clip_image, clip_image) if m > 0 else None
    lv = adapacse_loss(
        p1, p2, v, vv, m, temperature, bias=bias_v, form=form, reduce_views=reduce_views
    )
    if t is None:
        return lv, None
    cc = frozen_cosine(clip_text, clip_text) if m > 0 else None
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
    return (s > threshold)[off].float().mean()
