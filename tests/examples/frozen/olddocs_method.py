"""FROZEN: a plug-in written from docs/methods.md as it was before the import surface
(trainables.objectives) existed: the worked example of that page, verbatim but for its name
("olddocs"), with the imports that page printed (``from trainables.checks import ...``, a module
that has since moved). Do not update it: tests/examples/test_plugin_surface.py checks that such
a file still loads (with one deprecation line) and dry-runs. When the forwarding names it uses
are removed, delete this file and that test together."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from trainables.checks import NON_NEGATIVE, POSITIVE, Number, setting
from trainables.objectives.core import cosine_matrix, frozen_cosine, no_autocast
from trainables.objectives.methods import (
    Head,
    HeadDims,
    Method,
    Needs,
    Settings,
    StudentOutputs,
    TeacherInputs,
    need,
    register,
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
class OldDocsSettings(Settings):
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
class OldDocs(Method):
    name = "olddocs"
    settings = OldDocsSettings
    recipes = {"demo": {"objective.lam": 1.0}}  # the demo's grounding weight, as for MCSE

    def needs(self, s: OldDocsSettings) -> Needs:
        return Needs(image=True)  # caption batches with their stored image feature

    def heads(self, s: OldDocsSettings, dims: HeadDims) -> dict[str, Head]:
        # MCSE's two heads: p1, p2 from [CLS] (both dropout views), v from the image feature.
        return {"grounding": Head("cls", dims.proj_dim, into=("p1", "p2")),
                "image_head": Head("image", dims.proj_dim, into=("v",))}

    def caption_loss(self, s: OldDocsSettings, out: StudentOutputs, teacher: TeacherInputs, *,
                     generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        text = text_infonce(out, s.temperature)
        p1, p2, v = need(out, "softground grounding", "p1", "p2", "v")
        grounding = soft_grounding_loss(p1, p2, v, teacher.image, s.alpha, s.temperature_vl,
                                        s.teacher_temperature)
        return {"text": text, "grounding": grounding, "total": text + s.lam * grounding}
