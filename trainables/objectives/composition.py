"""One config type and one function that compose the loss terms of SimCSE, MCSE, KDMCSE and DALR.

Why: a grid row or an ablation should state only what it changes, and every method's total should
be reproducible from named terms. ``ObjectiveConfig.resolved()`` fills the official code's values
per method and rejects nonsense; ``compute_objective`` returns every term it computed and
``"total"``. The terms come from the sibling modules core, kdmcse and dalr.

Totals (code reading, default; docs/official-code.md §4.2, §5.3, §6.3):

- text-only batch (``teacher=None``), every method: total = text, where text is the SimCSE
  InfoNCE on z1 -> z2, with the fixed angular margin m1 (``text_margin``) for kdmcse and dalr.
- simcse pair batch: text only (the captions are just sentences).
- mcse / kdmcse pair batch: total = text + lam * inter, inter = grounding_image + grounding_text
  (grounding_text only with ``clip_text_term``; AdapACSE when ``grounding_margin > 0`` and
  ``adaptive_margin``, else plain InfoNCE; ``threshold`` adds the false-negative filter).
- dalr pair batch: total = text + lam * cross + mu * intra,
  cross = consistency_weight * consistency + cma + info,  intra = ima + rank + g2l.

``paper_reading=True`` changes exactly this (docs/official-code.md §8):

- mcse: the two dropout views are summed in each grounding term (paper l^M), not averaged.
- kdmcse: inter = (grounding_image + grounding_text) / 2 (Eq. 14), and the grounding logits use
  Eq. 12 as printed (every off-diagonal negative gets theta - m * |1 - s|, no theta > m test).
  The text term keeps its margin (set text_margin=0 for plain SimCSE text batches).
- dalr: Eq. 14, L = text + info + lam * (consistency + cma) + mu * (ima + rank): L_Info leaves the
  lam bracket, consistency is unweighted inside L_CML, and g2l (code only) is not computed.
  The text InfoNCE stays. "cross" and "intra" then hold L_CML and L_IML.

A switched-off term is absent from the dict and from the total. DALR with an empty
``text_teacher_local`` reports g2l = 0. Teacher tensors are detached and used in at least float32.

``ObjectiveConfig.get_config_dict()`` lists the settings a config really uses for its method.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from trainables.checks import (
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
from trainables.objectives.core import (
    adapacse_loss,
    angular_margin_logits,
    diagonal_cross_entropy,
    frozen_cosine,
)
from trainables.objectives.dalr import (
    dalr_cma_loss,
    dalr_consistency_loss,
    dalr_global_local_loss,
    dalr_ima_loss,
    dalr_teacher_embedding,
    dalr_teacher_local,
    dalr_teacher_scores,
    listmle_loss,
)
from trainables.objectives.kdmcse import kdmcse_grounding_terms

METHODS = ("simcse", "mcse", "kdmcse", "dalr")
_LAM = {"simcse": 0.0, "mcse": 0.01, "kdmcse": 0.01, "dalr": 0.1}
_MU = {"dalr": 0.2}
_TEXT_MARGIN = {"kdmcse": 0.15, "dalr": 0.18}
_GROUNDING_MARGIN = {"kdmcse": 0.15, "dalr": 0.18}
ANGLE = Number(0, math.pi, hi_open=True, hint="an angle in radians; official 0.15 / 0.18")


@dataclass(frozen=True)
class ObjectiveConfig:
    """Every weight, margin, temperature and switch of the four objectives.

    ``None`` for a value means "the official code's value for this method" (resolved by
    :meth:`resolved`), so one config type serves all four methods and a grid row states only
    what it changes.
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

    @property
    def is_resolved(self) -> bool:
        """True when every method-dependent value is filled in (see :meth:`resolved`)."""
        return None not in (self.lam, self.mu, self.text_margin, self.grounding_margin,
                            self.clip_text_term)

    def resolved(self) -> ObjectiveConfig:
        """This config with the method's official values filled in; ValueError on bad settings."""
        m = self.method
        if m not in METHODS:
            raise ValueError(f"unknown objective method {m!r}; use one of {', '.join(METHODS)}")
        out = dataclasses.replace(
            self,
            lam=_LAM[m] if self.lam is None else self.lam,
            mu=_MU.get(m, 0.0) if self.mu is None else self.mu,
            text_margin=_TEXT_MARGIN.get(m, 0.0) if self.text_margin is None else self.text_margin,
            grounding_margin=(
                _GROUNDING_MARGIN.get(m, 0.0)
                if self.grounding_margin is None
                else self.grounding_margin
            ),
            clip_text_term=(m == "kdmcse") if self.clip_text_term is None else self.clip_text_term,
            teacher_weights=tuple(self.teacher_weights),
        )
        out._validate()
        return out

    def _validate(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(f"ObjectiveConfig: {msg}")

        try:
            check_fields(self, "objective.")
        except ValueError as e:
            bad(str(e))
        if self.threshold is not None and self.method not in ("mcse", "kdmcse"):
            bad(f"threshold filtering is a KDMCSE option; method {self.method!r} ignores it: "
                "set threshold=None")
        if self.clip_text_term and self.method not in ("mcse", "kdmcse"):
            bad(f"clip_text_term is a KDMCSE/MCSE term; method {self.method!r} has none: set it "
                "to None or False")
        if not any(self.teacher_weights):
            bad(f"teacher_weights={self.teacher_weights}: at least one teacher needs a weight > 0")

    def replace(self, **changes) -> ObjectiveConfig:
        return dataclasses.replace(self, **changes)

    def get_config_dict(self) -> dict[str, Any]:
        """The effective settings of this objective: resolved, and only what the method uses.

        Like sentence-transformers' ``loss.get_config_dict()``: a description for a model card,
        run params or a comparison. Defaults are filled in (``resolved``; ValueError likewise),
        settings the method or a switched-off term ignores are left out, and the margin is
        reported as it acts: ``adaptive_margin`` is True only when AdapACSE runs (on and
        ``grounding_margin > 0``), and ``grounding_margin`` appears only then. So two configs
        that compute the same objective give the same dict (kdmcse's default and an explicit
        ``grounding_margin=0.15`` do), and a dict names no knob that would change nothing.
        """
        c = self.resolved()
        out: dict[str, Any] = {
            "method": c.method, "temperature": c.temperature, "text_margin": c.text_margin,
        }
        if c.method == "simcse":  # text InfoNCE only, on every batch
            return out
        if c.method == "dalr":
            return {**out, **c._dalr_settings()}
        out.update(lam=c.lam, temperature_vl=c.temperature_vl, **c._margin_settings(),
                   clip_text_term=c.clip_text_term)
        if c.threshold is not None:
            out.update(threshold=c.threshold, threshold_on=c.threshold_on)
        out["paper_reading"] = c.paper_reading
        return out

    def _margin_settings(self) -> dict[str, Any]:
        if self.adaptive_margin and self.grounding_margin > 0:
            return {"adaptive_margin": True, "grounding_margin": self.grounding_margin}
        return {"adaptive_margin": False}

    def _dalr_settings(self) -> dict[str, Any]:
        paper = self.paper_reading
        names = ("consistency", "cma", "info", "ima", "rank") + (() if paper else ("g2l",))
        on = {n: getattr(self, f"use_{n}") for n in names}
        out: dict[str, Any] = {f"use_{n}": v for n, v in on.items()}
        # lam and mu weigh brackets (module docstring); info leaves lam's bracket in the paper
        if any(on[n] for n in ("consistency", "cma") + (() if paper else ("info",))):
            out["lam"] = self.lam
        if any(on.get(n) for n in ("ima", "rank", "g2l")):
            out["mu"] = self.mu
        out["paper_reading"] = paper
        if on["consistency"]:
            if not paper:
                out["consistency_weight"] = self.consistency_weight
            out.update(consistency_margin=self.consistency_margin,
                       consistency_shift=self.consistency_shift)
        if on["info"]:
            out.update(temperature_vl=self.temperature_vl, **self._margin_settings())
        if on["cma"] or on["ima"]:
            out.update(kl_student_temperature=self.kl_student_temperature,
                       kl_teacher_temperature=self.kl_teacher_temperature)
        if on["rank"]:
            out.update(teacher_temperature=self.teacher_temperature, rank_gamma=self.rank_gamma,
                       rank_eps=self.rank_eps)
        if on.get("g2l"):
            out["g2l_normalize"] = self.g2l_normalize
        if any(on.get(n) for n in ("cma", "ima", "rank", "g2l")):
            out["teacher_weights"] = self.teacher_weights
        return out


@dataclass
class StudentOutputs:
    """What the student model produces for one batch (bs rows, two dropout views).

    Fields that a batch kind does not need are None (text batches carry only z1, z2, cls1, cls2).
    """

    z1: torch.Tensor
    """(bs, d) MLP output, view 1"""
    z2: torch.Tensor
    """(bs, d) MLP output, view 2"""
    cls1: torch.Tensor | None = None
    """(bs, d) [CLS] before the MLP, view 1 (l_pool; the evaluation embedding)"""
    cls2: torch.Tensor | None = None
    p1: torch.Tensor | None = None
    """(bs, g) grounding head on cls1, L2-normalised"""
    p2: torch.Tensor | None = None
    v: torch.Tensor | None = None
    """(bs, g) image head on the image feature, L2-normalised"""
    t: torch.Tensor | None = None
    """(bs, g) CLIP-text head on the CLIP caption feature, L2-normalised"""
    text_aligned: torch.Tensor | None = None
    """(bs, 256) DALR text_aligner(z1)"""
    image_aligned: torch.Tensor | None = None
    """(bs, 256) DALR image_aligner(raw clip image feature)"""
    attention_mask: torch.Tensor | None = None
    """(bs, L) student attention mask"""


@dataclass
class TeacherInputs:
    """Frozen teacher quantities for a caption+image batch (no gradients)."""

    image: torch.Tensor
    """(bs, Dv) stored image feature as stored (CLIP image, unnormalised; or ResNet)"""
    clip_text: torch.Tensor | None = None
    """(bs, Dt) stored CLIP text feature of the caption, unnormalised"""
    text_teachers: tuple[torch.Tensor, ...] = ()
    """DALR: one (bs, d) [CLS] embedding per text teacher, same order as teacher_weights"""
    text_teacher_local: tuple[torch.Tensor, ...] = ()
    """DALR g2l: one (bs, L-1, d) token-state tensor per text teacher (may be empty: g2l then 0)"""


def _need(obj: object, term: str, *fields: str) -> list[torch.Tensor]:
    missing = [f for f in fields if getattr(obj, f) is None]
    if missing:
        raise ValueError(
            f"{term} needs {type(obj).__name__}.{', '.join(missing)}; compute it or switch the term off"
        )
    return [getattr(obj, f) for f in fields]


def _grounding(cfg: ObjectiveConfig, s: StudentOutputs, teacher: TeacherInputs, text: torch.Tensor):
    p1, p2, v = _need(s, f"{cfg.method} grounding", "p1", "p2", "v")
    t = _need(s, "clip_text_term", "t")[0] if cfg.clip_text_term else None
    kdmcse_paper = cfg.paper_reading and cfg.method == "kdmcse"
    lv, lt = kdmcse_grounding_terms(
        p1, p2, v, t, teacher.image, teacher.clip_text, cfg.grounding_margin, cfg.threshold,
        cfg.temperature_vl, adaptive_margin=cfg.adaptive_margin, threshold_on=cfg.threshold_on,
        form="eq12" if kdmcse_paper else "code",
        reduce_views="sum" if cfg.paper_reading and cfg.method == "mcse" else "mean",
    )
    out = {"grounding_image": lv}
    inter = lv
    if lt is not None:
        out["grounding_text"] = lt
        inter = (lv + lt) / 2 if kdmcse_paper else lv + lt
    out["inter"] = inter
    out["total"] = text + cfg.lam * inter
    return out


def _dalr(cfg: ObjectiveConfig, s: StudentOutputs, teacher: TeacherInputs, text: torch.Tensor,
          text_logits: torch.Tensor, generator: torch.Generator | None):
    z1, z2, w = s.z1, s.z2, cfg.teacher_weights
    kl = {"student_temperature": cfg.kl_student_temperature,
          "teacher_temperature": cfg.kl_teacher_temperature}
    out: dict[str, torch.Tensor] = {}
    if (cfg.use_cma or cfg.use_ima or cfg.use_rank) and not teacher.text_teachers:
        raise ValueError(
            "DALR's cma/ima/rank need TeacherInputs.text_teachers (one [CLS] embedding per "
            "text teacher); pass them or set use_cma/use_ima/use_rank=False"
        )
    f_t = None
    if cfg.use_cma or cfg.use_ima:
        f_t = dalr_teacher_embedding(teacher.text_teachers, w)
    if cfg.use_consistency:
        ta, ia = _need(s, "DALR consistency", "text_aligned", "image_aligned")
        out["consistency"] = dalr_consistency_loss(
            ta, ia, cfg.consistency_margin, cfg.consistency_shift
        )
    if cfg.use_cma:
        out["cma"] = dalr_cma_loss(
            z1, teacher.image, f_t, cfg.text_margin, temperature=cfg.temperature, **kl
        )
    if cfg.use_info:
        p1, p2, v = _need(s, "DALR info", "p1", "p2", "v")
        adaptive = cfg.adaptive_margin and cfg.grounding_margin > 0
        vv = frozen_cosine(teacher.image, teacher.image) if adaptive else None
        out["info"] = adapacse_loss(
            p1, p2, v, vv, cfg.grounding_margin if adaptive else 0.0, cfg.temperature_vl
        )
    if cfg.use_ima:
        out["ima"] = dalr_ima_loss(z1, z2, f_t, cfg.text_margin, temperature=cfg.temperature, **kl)
    if cfg.use_rank:
        s_t = dalr_teacher_scores(teacher.text_teachers, w, cfg.teacher_temperature)
        out["rank"] = cfg.rank_gamma * listmle_loss(
            text_logits, s_t, cfg.rank_eps, generator=generator
        )
    if cfg.use_g2l and not cfg.paper_reading:
        if teacher.text_teacher_local:
            mask = _need(s, "DALR g2l", "attention_mask")[0][:, 1:]  # the code drops [CLS]
            local = dalr_teacher_local(teacher.text_teacher_local, w)
            out["g2l"] = dalr_global_local_loss(
                local, z1, mask, temperature=cfg.temperature, normalize=cfg.g2l_normalize
            )
        else:
            out["g2l"] = z1.new_zeros(())

    def total(*names: str, weights: dict[str, float] | None = None) -> torch.Tensor:
        weights = weights or {}
        return sum((weights.get(n, 1.0) * out[n] for n in names if n in out), z1.new_zeros(()))

    if cfg.paper_reading:
        cross = total("consistency", "cma")
        intra = total("ima", "rank")
        grand = text + total("info") + cfg.lam * cross + cfg.mu * intra
    else:
        cross = total("consistency", "cma", "info", weights={"consistency": cfg.consistency_weight})
        intra = total("ima", "rank", "g2l")
        grand = text + cfg.lam * cross + cfg.mu * intra
    out.update(cross=cross, intra=intra, total=grand)
    return out


def compute_objective(
    cfg: ObjectiveConfig, student: StudentOutputs, teacher: TeacherInputs | None,
    *, generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Every named term and ``"total"``. ``teacher is None`` means a text-only batch.

    Keys: "text" always; mcse/kdmcse "grounding_image", "grounding_text", "inter"; dalr
    "consistency", "cma", "info", "ima", "rank", "g2l", "cross", "intra" (switched-off terms absent);
    "total". ``generator`` seeds ListMLE's tie-break permutation (default: global CPU RNG).
    """
    if not cfg.is_resolved:  # plans resolve once; a script may pass a bare config
        cfg = cfg.resolved()
    z1, z2 = student.z1, student.z2
    if z1.dim() != 2 or z1.shape != z2.shape:
        raise ValueError(
            f"z1 {tuple(z1.shape)} and z2 {tuple(z2.shape)} must be equal (bs, d) tensors"
        )
    text_logits = angular_margin_logits(z1, z2, cfg.temperature, cfg.text_margin)
    text = diagonal_cross_entropy(text_logits)
    out = {"text": text}
    if teacher is None or cfg.method == "simcse":
        out["total"] = text
        return out
    if teacher.image.shape[0] != z1.shape[0]:
        raise ValueError(
            f"teacher image feature has {teacher.image.shape[0]} rows but the batch has {z1.shape[0]}"
        )
    if cfg.method == "dalr":
        out.update(_dalr(cfg, student, teacher, text, text_logits, generator))
    else:
        out.update(_grounding(cfg, student, teacher, text))
    return out
