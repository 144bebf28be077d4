"""``compute_objective`` for any registered method, and ``ObjectiveConfig``, the one flat config of
the four built-in methods that scripts written before methods had settings of their own use.

Why keep the flat config: a script that builds ``ObjectiveConfig(method="kdmcse", lam=0.5)`` and
calls ``compute_objective(cfg, student, teacher)`` must keep working. ``None`` in it means "the
method's own value", which :meth:`ObjectiveConfig.resolved` fills in from the method's settings
class (``trainables.objectives.<method>``); :meth:`ObjectiveConfig.settings` turns it into those
settings. Runs (``trainables.config.run_config.RunConfig``) hold the method's settings directly.

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

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

# The built-in methods register themselves when their modules are imported.
from trainables.objectives import dalr as _dalr  # noqa: F401
from trainables.objectives import kdmcse as _kdmcse  # noqa: F401
from trainables.objectives import mcse as _mcse  # noqa: F401
from trainables.objectives import simcse as _simcse  # noqa: F401
from trainables.objectives.methods import (
    ANGLE,
    Settings,
    StudentOutputs,
    TeacherInputs,
    builtin_names,
    get,
    method_of,
)
from trainables.runtime.checks import (
    FINITE,
    NON_NEGATIVE,
    POSITIVE,
    Choice,
    Each,
    Flag,
    Number,
    Optional,
    check_fields,
    count,
    setting,
)

METHODS = builtin_names()
"""the methods that ship with mmemb (``trainables.objectives.methods.names()``: all registered)"""


@dataclass(frozen=True)
class ObjectiveConfig:
    """Every weight, margin, temperature and switch of the four built-in objectives, flat.

    ``None`` for a value means "this method's own value" (resolved by :meth:`resolved`).
    """

    method: str = setting("mcse", Choice(METHODS))
    """simcse | mcse | kdmcse | dalr"""
    temperature: float = setting(0.05, POSITIVE)
    """tau of the text-text InfoNCE (all repos: 0.05)"""
    temperature_vl: float = setting(0.05, POSITIVE)
    """tau' of the cross-modal terms (all repos: 0.05)"""
    lam: float | None = setting(None, Optional(NON_NEGATIVE))
    """lambda: weight of the multimodal part (mcse 0.01, kdmcse 0.01, dalr 0.1 on 'cross')"""
    mu: float | None = setting(None, Optional(NON_NEGATIVE))
    """mu: DALR weight of the intra-modal part (0.2); unused elsewhere"""
    text_margin: float | None = setting(None, Optional(ANGLE))
    """m1: fixed angular margin on text-text negatives (kdmcse 0.15, dalr 0.18, else 0 = plain cos)"""
    grounding_margin: float | None = setting(None, Optional(ANGLE))
    """m2: AdapACSE margin on grounding negatives (kdmcse 0.15, dalr 0.18, else 0 = plain InfoNCE)"""
    adaptive_margin: bool = setting(True, Flag())
    """AdapACSE on (Delta = 1 - teacher intra-modal cosine); off = plain InfoNCE grounding"""
    threshold: float | None = setting(None, Optional(FINITE))
    """false-negative filter value (off in the official scripts; score_base 0.8 when on); mcse/kdmcse"""
    threshold_on: str = setting("dot", Choice(("dot", "cosine")))
    """'dot': raw dot products of stored CLIP features (code); 'cosine': cosines (paper's reading)"""
    clip_text_term: bool | None = setting(None, Optional(Flag()))
    """KDMCSE's L_t over CLIP-text features (None: kdmcse True, else False); MCSE may opt in (KDMCSE Table 5)"""
    use_info: bool = setting(True, Flag())
    """DALR L_Info (code: AdapACSE image grounding, 'L_cross')"""
    use_consistency: bool = setting(True, Flag())
    """DALR L_cons"""
    use_cma: bool = setting(True, Flag())
    """DALR L_CMA"""
    use_ima: bool = setting(True, Flag())
    """DALR L_IMA"""
    use_rank: bool = setting(True, Flag())
    """DALR L_rank (ListMLE)"""
    use_g2l: bool = setting(True, Flag())
    """DALR global-local token InfoNCE (code-only, not in the paper)"""
    consistency_weight: float = setting(0.01, NON_NEGATIVE)
    consistency_margin: float = setting(0.2, Number(-1, 1, hint="a cosine margin"))
    consistency_shift: int = setting(5, count(1, "images rolled by this many rows"))
    kl_student_temperature: float = setting(0.45, POSITIVE)
    kl_teacher_temperature: float = setting(0.5, POSITIVE)
    teacher_weights: tuple[float, ...] = setting((0.33, 0.67), Each(NON_NEGATIVE))
    """weights of the DALR text teachers (SimCSE 0.33, DiffCSE 0.67)"""
    teacher_temperature: float = setting(0.05, POSITIVE)
    rank_eps: float = setting(1e-7, POSITIVE)
    paper_reading: bool = setting(False, Flag())
    """True: formulas as the papers print them where they differ from the code (module docstring)"""
    rank_gamma: float = setting(1.0, NON_NEGATIVE)
    """gamma: ListMLE weight inside 'rank' (DALR scripts: 1.0)"""
    g2l_normalize: str = setting("tokens", Choice(("tokens", "features")))
    """'tokens': the code's token-axis normalisation of Local_T; 'features': per-token vectors"""

    _BY_METHOD = ("lam", "mu", "text_margin", "grounding_margin", "clip_text_term")
    """the settings whose None means the method's own value"""

    @property
    def is_resolved(self) -> bool:
        """True when every method-dependent value is filled in (see :meth:`resolved`)."""
        return all(getattr(self, k) is not None for k in self._BY_METHOD)

    def resolved(self) -> ObjectiveConfig:
        """This config with the method's values filled in (from its settings class; a setting the
        method has none of is off: 0 or False); ValueError on bad settings."""
        m = self.method
        if m not in METHODS:
            raise ValueError(f"unknown objective method {m!r} for ObjectiveConfig; use one of "
                             f"{', '.join(METHODS)} (another method's settings: its own class)")
        own = get(m).settings()
        filled = {k: getattr(self, k) if getattr(self, k) is not None else
                  getattr(own, k, False if k == "clip_text_term" else 0.0) for k in self._BY_METHOD}
        out = dataclasses.replace(self, **filled, teacher_weights=tuple(self.teacher_weights))
        out._validate()
        return out

    def _validate(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(f"ObjectiveConfig: {msg}")

        try:
            check_fields(self, "objective.")
        except ValueError as e:
            bad(str(e))
        own = {f.name for f in dataclasses.fields(get(self.method).settings)}
        if self.threshold is not None and "threshold" not in own:
            bad(f"threshold filtering is a KDMCSE option; method {self.method!r} ignores it: "
                "set threshold=None")
        if self.clip_text_term and "clip_text_term" not in own:
            bad(f"clip_text_term is a KDMCSE/MCSE term; method {self.method!r} has none: set it "
                "to None or False")
        if not any(self.teacher_weights):
            bad(f"teacher_weights={self.teacher_weights}: at least one teacher needs a weight > 0")

    def settings(self) -> Settings:
        """The method's own settings with these values (resolved; ValueError likewise)."""
        c = self.resolved()
        cls = get(c.method).settings
        return cls(**{f.name: getattr(c, f.name) for f in dataclasses.fields(cls)})

    def replace(self, **changes) -> ObjectiveConfig:
        return dataclasses.replace(self, **changes)

    def get_config_dict(self) -> dict[str, Any]:
        """The effective settings of this objective: resolved, and only what the method uses.

        Like sentence-transformers' ``loss.get_config_dict()``: a description for a model card,
        run params or a comparison (the method's ``describe``). Settings the method or a
        switched-off term ignores are left out, and the margin is reported as it acts, so two
        configs that compute the same objective give the same dict.
        """
        s = self.settings()
        return method_of(s).describe(s)


def compute_objective(
    cfg: ObjectiveConfig | Settings, student: StudentOutputs, teacher: TeacherInputs | None,
    *, generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Every named term and ``"total"`` of ``cfg``'s method. ``teacher is None`` means a
    text-only batch.

    ``cfg``: a method's settings, or an ``ObjectiveConfig``. Keys: "text" always; then the
    method's terms (mcse/kdmcse "grounding_image", "grounding_text", "inter"; dalr
    "consistency", "cma", "info", "ima", "rank", "g2l", "cross", "intra"; switched-off terms
    absent); "total". ``generator`` seeds the loss's randomness (ListMLE's tie-break permutation;
    default: global CPU RNG).
    """
    s = cfg.settings() if isinstance(cfg, ObjectiveConfig) else cfg
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
