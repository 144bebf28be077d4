"""KDMCSE (NAACL 2024): MCSE's grounding with AdapACSE margins, the CLIP-text term L_t and an
optional false-negative filter; the method, registered as ``kdmcse``.

The terms add up as text + lam * inter, inter = L_v + L_t in the code, (L_v + L_t) / 2 in KDMCSE
paper Eq. 14 (``paper_reading``). The grounding itself, which MCSE shares, is
:mod:`trainables.objectives.grounding` (docs/official-code.md §5.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trainables.objectives.grounding import (
    GroundingSettings,
    check_grounding_store,
    describe_grounding,
    grounding_filter,
    grounding_heads,
    grounding_loss,
)
from trainables.objectives.methods import (
    Head,
    HeadDims,
    Method,
    Needs,
    NegativeFilter,
    StoreView,
    StudentOutputs,
    TeacherInputs,
    register,
)


@dataclass(frozen=True)
class KDMCSESettings(GroundingSettings):
    """KDMCSE (NAACL 2024): the official scripts' values (docs/official-code.md §5.6)."""


@register
class KDMCSE(Method):
    """KDMCSE: MCSE's grounding with AdapACSE margins, KDMCSE's CLIP-text term L_t and an
    optional false-negative filter; the text term carries the fixed margin m1."""

    name = "kdmcse"
    settings = KDMCSESettings
    defaults_from = "official code"
    # the official scripts (docs/official-code.md §5.6); on the demo, MCSE's grounding weight, as in
    # the paper (the same lam for both)
    recipes = {"paper": {"lr": 3e-5, "batch_size": 64, "epochs": 3}, "demo": {"objective.lam": 1.0}}

    def needs(self, s: KDMCSESettings) -> Needs:
        return Needs(image=True, clip_text=s.clip_text_term)

    def heads(self, s: KDMCSESettings, dims: HeadDims) -> dict[str, Head]:
        # The code always builds tmlp; without clip_text it takes the image dim (CLIP's shared space).
        return grounding_heads(s, dims, dims.clip_text_dim or dims.image_dim)

    def caption_loss(self, s: KDMCSESettings, out: StudentOutputs, teacher: TeacherInputs, *,
                     generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        paper = s.paper_reading
        return grounding_loss(s, out, teacher, self.name, form="eq12" if paper else "code",
                              average=paper)

    def describe(self, s: KDMCSESettings) -> dict[str, Any]:
        return describe_grounding(self.name, s)

    def negative_filter(self, s: KDMCSESettings) -> NegativeFilter | None:
        return grounding_filter(s)

    def check_data(self, s: KDMCSESettings, store: StoreView) -> None:
        check_grounding_store(s, store)
