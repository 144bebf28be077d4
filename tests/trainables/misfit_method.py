"""A plug-in method whose head does not fit its loss, for the tests of a member that fails alone
and of the dry run that builds each method once.

``misfit``: a linear head ``aux`` of 7 outputs on z, multiplied in its loss with z itself (the
student's hidden size): ``RuntimeError: The size of tensor a (7) must match the size of tensor b``.
Registered when this module is imported (or passed to ``--methods``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainables.objectives.methods import (
    Head,
    HeadDims,
    Method,
    Needs,
    Settings,
    StudentOutputs,
    TeacherInputs,
    register,
    text_infonce,
)
from trainables.runtime.checks import POSITIVE, setting


@dataclass(frozen=True)
class MisfitSettings(Settings):
    temperature: float = setting(0.05, POSITIVE)


@register
class Misfit(Method):
    name = "misfit"
    settings = MisfitSettings

    def needs(self, s: MisfitSettings) -> Needs:
        return Needs()

    def heads(self, s: MisfitSettings, dims: HeadDims) -> dict[str, Head]:
        return {"aux": Head("z", 7, kind="linear", batches="all")}

    def text_loss(self, s: MisfitSettings, out: StudentOutputs) -> dict[str, torch.Tensor]:
        bad = (out.extra["aux"][:, 0] * out.z1).mean()  # (bs, 7) * (bs, hidden)
        text = text_infonce(out, s.temperature)
        return {"text": text, "aux": bad, "total": text + bad}

    def caption_loss(self, s: MisfitSettings, out: StudentOutputs, teacher: TeacherInputs, *,
                     generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        return self.text_loss(s, out)
