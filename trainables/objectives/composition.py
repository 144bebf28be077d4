"""``compute_objective`` for any registered method, given that method's settings.

A method's values have one source: its settings dataclass (``trainables.objectives.<method>``,
e.g. ``KDMCSESettings(lam=0.5)``, or ``methods.get("kdmcse").settings(lam=0.5)`` by name), which
runs (``trainables.config.run_config.RunConfig.objective``) hold too.

Totals (code reading, default; docs/official-code.md §4.2, §5.3, §6.3), per method module:

- text-only batch (``teacher=None``), every method: total = text, where text is the SimCSE
  InfoNCE on z1 -> z2, with the fixed angular margin m1 (``text_margin``) for kdmcse and dalr.
- simcse pair batch: text only (the captions are just sentences).
- mcse / kdmcse pair batch: total = text + lam * inter, inter = grounding_image + grounding_text
  (``trainables.objectives.kdmcse``).
- dalr pair batch: total = text + lam * cross + mu * intra (``trainables.objectives.dalr``).

``paper_reading=True`` (docs/official-code.md §8): mcse sums the two views in each grounding term
(paper l^M); kdmcse averages inter (Eq. 14) and uses Eq. 12's negatives; dalr follows Eq. 14.
"""

from __future__ import annotations

import torch

# The built-in methods register themselves when their modules are imported.
from trainables.objectives import dalr as _dalr  # noqa: F401
from trainables.objectives import kdmcse as _kdmcse  # noqa: F401
from trainables.objectives import mcse as _mcse  # noqa: F401
from trainables.objectives import simcse as _simcse  # noqa: F401
from trainables.objectives.methods import (
    Settings,
    StudentOutputs,
    TeacherInputs,
    builtin_names,
    method_of,
)

METHODS = builtin_names()
"""the methods that ship with mmemb (``trainables.objectives.methods.names()``: all registered)"""


def compute_objective(
    cfg: Settings, student: StudentOutputs, teacher: TeacherInputs | None,
    *, generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Every named term and ``"total"`` of ``cfg``'s method. ``teacher is None`` means a
    text-only batch.

    ``cfg``: a method's settings. Keys: "text" always; then the
    method's terms (mcse/kdmcse "grounding_image", "grounding_text", "inter"; dalr
    "consistency", "cma", "info", "ima", "rank", "g2l", "cross", "intra"; switched-off terms
    absent); "total". ``generator`` seeds the loss's randomness (ListMLE's tie-break permutation;
    default: global CPU RNG).
    """
    s = cfg
    method = method_of(s)
    z1, z2 = student.z1, student.z2
    if z1.dim() != 2 or z1.shape != z2.shape:
        raise ValueError(
            f"z1 {tuple(z1.shape)} and z2 {tuple(z2.shape)} must be equal (bs, d) tensors"
        )
    if teacher is None or not method.needs(s).captions:
        out = method.text_loss(s, student)
    else:
        if teacher.image.shape[0] != z1.shape[0]:
            raise ValueError(
                f"teacher image feature has {teacher.image.shape[0]} rows but the batch has {z1.shape[0]}"
            )
        out = method.caption_loss(s, student, teacher, generator=generator)
    if "total" not in out:
        raise ValueError(f"method {method.name!r}: its loss returned {sorted(out)} without 'total'")
    for k, v in out.items():
        if not isinstance(v, torch.Tensor) or v.dim() != 0:
            raise ValueError(f"method {method.name!r}: term {k!r} is {getattr(v, 'shape', v)!s}; "
                             "a term is a scalar tensor (reduce it over the batch)")
    return out
