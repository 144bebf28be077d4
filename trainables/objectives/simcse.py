"""SimCSE (EMNLP 2021), unsupervised: the text InfoNCE of two dropout views, on every batch.

It reads no feature store (``Needs(captions=False)``): its runs train on text batches only
(docs/official-code.md §3). ``text_margin`` > 0 puts KDMCSE's fixed angular margin on the
negatives (0: SimCSE Eq. 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainables.objectives.methods import ANGLE, Method, Needs, Settings, register
from trainables.runtime.checks import POSITIVE, setting


@dataclass(frozen=True)
class SimCSESettings(Settings):
    temperature: float = setting(0.05, POSITIVE)
    """tau of the text InfoNCE (official 0.05)"""
    text_margin: float = setting(0.0, ANGLE)
    """fixed angular margin on text-text negatives (0 = plain cosine, SimCSE)"""


@register
class SimCSE(Method):
    name = "simcse"
    settings = SimCSESettings
    defaults_from = "official code"
    recipes = {"paper": {"lr": 3e-5, "batch_size": 64, "epochs": 3}}  # as MCSE's scripts train it

    def needs(self, s: SimCSESettings) -> Needs:
        return Needs(captions=False, image=False)

    def describe(self, s: SimCSESettings) -> dict[str, Any]:
        return {"method": self.name, "temperature": s.temperature, "text_margin": s.text_margin}
