"""SoftGround: MCSE whose grounding target is shared with look-alike images.

Why: a caption batch holds captions of near-identical scenes, and MCSE's grounding InfoNCE
pushes each caption away from the other captions' images even when those images show the same
thing (false negatives). KDMCSE cuts such negatives out with a hard threshold on CLIP scores and
bends the rest with an angular margin; DALR distils the teacher's whole similarity distribution
through extra KL terms, heads and text teachers. SoftGround keeps MCSE's one grounding term and
its heads and changes only the target: each caption keeps 1 - alpha of its probability on its own
image and spreads alpha over the batch's images by the frozen image features' similarity to its
own image (label smoothing toward the image teacher). A near-duplicate then counts as partly
positive in proportion to how alike the images are: no threshold to tune, no new head, one knob
(alpha = 0 is MCSE exactly). None of the three papers smooths the grounding target.

    L_g = 1/2 sum_a mean_i [ -sum_j q_ij log softmax_j(cos(p_a,i, v_j) / tau') ]
    q_i = (1 - alpha) e_i + alpha softmax_j(cos(img_i, img_j) / tau_t)
    total = text + lam * L_g            (text: SimCSE's InfoNCE; a text batch: text only)

Run it against MCSE on the demo: ``python -m orchestrator.ablate --grid examples/softground_grid.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from trainables.objectives import (
    NON_NEGATIVE,
    POSITIVE,
    Head,
    HeadDims,
    Method,
    Needs,
    Number,
    Settings,
    StudentOutputs,
    TeacherInputs,
    cosine_matrix,
    frozen_cosine,
    need,
    no_autocast,
    register,
    setting,
    text_infonce,
)


def soft_targets(image: torch.Tensor, alpha: float, teacher_temperature: float) -> torch.Tensor:
    """q = (1 - alpha) I + alpha softmax(cos(img, img) / tau_t), rows summing to 1; no gradient."""
    with no_autocast(image):
        spread = torch.softmax(frozen_cosine(image, image) / teacher_temperature, dim=1)
        eye = torch.eye(spread.shape[0], dtype=spread.dtype, device=spread.device)
        return (1.0 - alpha) * eye + alpha * spread


def soft_grounding_loss(p1: torch.Tensor, p2: torch.Tensor, v: torch.Tensor, image: torch.Tensor,
                        alpha: float, temperature: float = 0.05,
                        teacher_temperature: float = 0.05) -> torch.Tensor:
    """Cross-entropy of each view's sentence->image softmax against the soft targets, the two
    dropout views averaged (as MCSE's code averages them)."""
    q = soft_targets(image, alpha, teacher_temperature)
    total = 0.0
    for p in (p1, p2):
        log_p = F.log_softmax(cosine_matrix(p, v) / temperature, dim=1)
        total = total - (q.to(log_p.dtype) * log_p).sum(dim=1).mean()
    return total / 2


@dataclass(frozen=True)
class SoftGroundSettings(Settings):
    temperature: float = setting(0.05, POSITIVE)
    """tau of the text InfoNCE (MCSE's 0.05)"""
    temperature_vl: float = setting(0.05, POSITIVE)
    """tau' of the grounding term (MCSE's 0.05)"""
    lam: float = setting(0.01, NON_NEGATIVE)
    """weight of the grounding term (MCSE's 0.01; the demo recipe below sets 1.0, as MCSE's)"""
    alpha: float = setting(0.3, Number(0, 1, hint="0 = MCSE's one-hot target"))
    """share of each caption's target spread over the batch's images by image similarity"""
    teacher_temperature: float = setting(0.05, POSITIVE)
    """tau_t: how sharply the spread favours the most similar images"""


@register
class SoftGround(Method):
    name = "softground"
    settings = SoftGroundSettings
    recipes = {"demo": {"objective.lam": 1.0}}  # the demo's grounding weight, as for MCSE

    def needs(self, s: SoftGroundSettings) -> Needs:
        return Needs(image=True)  # caption batches with their stored image feature

    def heads(self, s: SoftGroundSettings, dims: HeadDims) -> dict[str, Head]:
        # MCSE's two heads: p1, p2 from [CLS] (both dropout views), v from the image feature.
        return {"grounding": Head("cls", dims.proj_dim, into=("p1", "p2")),
                "image_head": Head("image", dims.proj_dim, into=("v",))}

    def caption_loss(self, s: SoftGroundSettings, out: StudentOutputs, teacher: TeacherInputs, *,
                     generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        text = text_infonce(out, s.temperature)
        p1, p2, v = need(out, "softground grounding", "p1", "p2", "v")
        grounding = soft_grounding_loss(p1, p2, v, teacher.image, s.alpha, s.temperature_vl,
                                        s.teacher_temperature)
        return {"text": text, "grounding": grounding, "total": text + s.lam * grounding}
