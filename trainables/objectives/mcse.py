"""MCSE (NAACL 2022): SimCSE's text InfoNCE plus a sentence->image grounding InfoNCE.

total = text + lam * inter on a caption batch, inter = L_MM (docs/official-code.md §4.2): the
grounding head's p1, p2 against the image head's v, plain InfoNCE, the two views averaged as in
the code (summed with ``paper_reading``, MCSE's l^M). The settings are the shared grounding's
(:class:`~trainables.objectives.grounding.GroundingSettings`) at MCSE's values: no margins, no
CLIP-text term, no filter; each may be switched on (KDMCSE Table 5 adds L_t to MCSE).
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
    ANGLE,
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
from trainables.runtime.checks import Flag, setting


@dataclass(frozen=True)
class MCSESettings(GroundingSettings):
    """MCSE: the official scripts' values (docs/official-code.md §4.4)."""

    text_margin: float = setting(0.0, ANGLE)
    """m1: fixed angular margin on text-text negatives (MCSE: 0, plain cosine)"""
    grounding_margin: float = setting(0.0, ANGLE)
    """m2: AdapACSE margin on grounding negatives (MCSE: 0, plain InfoNCE)"""
    clip_text_term: bool = setting(False, Flag())
    """KDMCSE's L_t over CLIP-text features added to MCSE (KDMCSE Table 5's MCSE_CLIPText)"""


@register
class MCSE(Method):
    name = "mcse"
    settings = MCSESettings
    defaults_from = "official code"
    # paper: the official scripts, BERT-base wiki+flickr (docs/official-code.md §4.4). demo: its
    # grounding weight (paper 0.01): in the demo's 60 steps MCSE at lam 0.01 ends below text-only
    # SimCSE, at 1.0 far above it (bench/README.md, "demo_world.py").
    recipes = {"paper": {"lr": 3e-5, "batch_size": 64, "epochs": 3}, "demo": {"objective.lam": 1.0}}

    def needs(self, s: MCSESettings) -> Needs:
        return Needs(image=True, clip_text=s.clip_text_term)

    def heads(self, s: MCSESettings, dims: HeadDims) -> dict[str, Head]:
        return grounding_heads(s, dims, dims.clip_text_dim)

    def caption_loss(self, s: MCSESettings, out: StudentOutputs, teacher: TeacherInputs, *,
                     generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        return grounding_loss(s, out, teacher, self.name,
                              reduce_views="sum" if s.paper_reading else "mean")

    def describe(self, s: MCSESettings) -> dict[str, Any]:
        return describe_grounding(self.name, s)

    def negative_filter(self, s: MCSESettings) -> NegativeFilter | None:
        return grounding_filter(s)

    def check_data(self, s: MCSESettings, store: StoreView) -> None:
        check_grounding_store(s, store)
