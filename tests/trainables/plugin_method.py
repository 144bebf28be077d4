"""A plug-in method for the tests: MCSE plus an extra head of its own on both batch kinds.

``auxhead``: a linear head ``aux`` on z (both dropout views, every batch) feeds an InfoNCE between
the two views' projections, weighted by ``beta``; caption batches add MCSE's grounding. It is
registered when this module is imported, as a user's package would be.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainables.objectives.core import mcse_grounding_loss, simcse_loss
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
from trainables.runtime.checks import NON_NEGATIVE, POSITIVE, count, setting


@dataclass(frozen=True)
class AuxHeadSettings(Settings):
    temperature: float = setting(0.05, POSITIVE)
    lam: float = setting(1.0, NON_NEGATIVE)
    """weight of MCSE's grounding term"""
    beta: float = setting(0.5, NON_NEGATIVE)
    """weight of the aux head's view-to-view InfoNCE"""
    aux_dim: int = setting(16, count(1))
    """output size of the aux head"""


@register
class AuxHead(Method):
    name = "auxhead"
    settings = AuxHeadSettings

    def needs(self, s: AuxHeadSettings) -> Needs:
        return Needs(image=True)

    def heads(self, s: AuxHeadSettings, dims: HeadDims) -> dict[str, Head]:
        return {"grounding": Head("cls", dims.proj_dim, into=("p1", "p2")),
                "image_head": Head("image", dims.proj_dim, into=("v",)),
                "aux": Head("z", s.aux_dim, kind="linear", batches="all")}

    def _aux(self, s: AuxHeadSettings, out: StudentOutputs) -> torch.Tensor:
        a = out.extra["aux"]
        return simcse_loss(a[:, 0], a[:, 1], s.temperature)

    def text_loss(self, s: AuxHeadSettings, out: StudentOutputs) -> dict[str, torch.Tensor]:
        text, aux = text_infonce(out, s.temperature), self._aux(s, out)
        return {"text": text, "aux": aux, "total": text + s.beta * aux}

    def caption_loss(self, s: AuxHeadSettings, out: StudentOutputs, teacher: TeacherInputs, *,
                     generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        terms = self.text_loss(s, out)
        p1, p2, v = need(out, "auxhead grounding", "p1", "p2", "v")
        terms["grounding"] = mcse_grounding_loss(p1, p2, v, s.temperature)
        terms["total"] = terms["total"] + s.lam * terms["grounding"]
        return terms
