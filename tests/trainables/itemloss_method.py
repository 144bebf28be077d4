"""A plug-in method for the tests whose loss reads a value back to the host (``.item()``), so
torch.func.vmap cannot batch it: MCSE's heads and terms, its grounding logits shifted by their
maximum read as a Python float (the shift leaves the cross-entropy as it is). Its members train
one by one, with the same numbers."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from trainables.objectives import (
    NON_NEGATIVE,
    POSITIVE,
    Head,
    Method,
    Needs,
    Settings,
    cosine_matrix,
    need,
    register,
    setting,
    text_infonce,
)


@dataclass(frozen=True)
class ItemLossSettings(Settings):
    temperature: float = setting(0.05, POSITIVE)
    temperature_vl: float = setting(0.05, POSITIVE)
    lam: float = setting(1.0, NON_NEGATIVE)


@register
class ItemLoss(Method):
    name = "itemloss"
    settings = ItemLossSettings

    def needs(self, s):
        return Needs(image=True)

    def heads(self, s, dims):
        return {"grounding": Head("cls", dims.proj_dim, into=("p1", "p2")),
                "image_head": Head("image", dims.proj_dim, into=("v",))}

    def caption_loss(self, s, out, teacher, *, generator=None):
        text = text_infonce(out, s.temperature)
        p1, p2, v = need(out, "itemloss grounding", "p1", "p2", "v")
        target = torch.arange(v.shape[0], device=v.device)
        terms = []
        for p in (p1, p2):
            logits = cosine_matrix(p, v) / s.temperature_vl
            shift = logits.max().item()  # a host read: vmap cannot batch this
            terms.append(F.cross_entropy(logits - shift, target))
        grounding = (terms[0] + terms[1]) / 2
        return {"text": text, "grounding": grounding, "total": text + s.lam * grounding}
