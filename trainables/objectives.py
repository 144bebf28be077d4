"""INTERFACE STUB: the objectives helper replaces the bodies; names and fields below are the contract.

Pure tensor functions for SimCSE, MCSE, KDMCSE and DALR (torch only).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

METHODS = ("simcse", "mcse", "kdmcse", "dalr")


@dataclass(frozen=True)
class ObjectiveConfig:
    """Every weight, margin, temperature and switch of the four objectives.

    ``None`` for a value means "the official code's value for this method" (resolved by
    :meth:`resolved`), so one config type serves all four methods and a grid row states only
    what it changes.
    """

    method: str = "mcse"
    """simcse | mcse | kdmcse | dalr"""
    temperature: float = 0.05
    """tau of the text-text InfoNCE (all repos: 0.05)"""
    temperature_vl: float = 0.05
    """tau' of the cross-modal terms (all repos: 0.05)"""
    lam: float | None = None
    """lambda: weight of the multimodal part (mcse 0.01, kdmcse 0.01, dalr 0.1 on 'cross')"""
    mu: float | None = None
    """mu: DALR weight of the intra-modal part (0.2); unused elsewhere"""
    text_margin: float | None = None
    """m1: fixed angular margin on text-text negatives (kdmcse 0.15, dalr 0.18, else 0 = plain cos)"""
    grounding_margin: float | None = None
    """m2: AdapACSE margin on grounding negatives (kdmcse 0.15, dalr 0.18)"""
    adaptive_margin: bool = True
    """AdapACSE on (Delta = 1 - teacher intra-modal cosine); off = plain InfoNCE grounding"""
    threshold: float | None = None
    """false-negative filter value (off in the official scripts; score_base 0.8 when on)"""
    threshold_on: str = "dot"
    """'dot': raw dot products of stored CLIP features (code); 'cosine': cosines (paper's reading)"""
    clip_text_term: bool = True
    """KDMCSE's L_t over CLIP-text features; MCSE can use it too (KDMCSE Table 5)"""
    use_info: bool = True
    """DALR L_Info (code: AdapACSE image grounding, 'L_cross')"""
    use_consistency: bool = True
    """DALR L_cons"""
    use_cma: bool = True
    """DALR L_CMA"""
    use_ima: bool = True
    """DALR L_IMA"""
    use_rank: bool = True
    """DALR L_rank (ListMLE)"""
    use_g2l: bool = True
    """DALR global-local token InfoNCE (code-only, not in the paper)"""
    consistency_weight: float = 0.01
    consistency_margin: float = 0.2
    consistency_shift: int = 5
    kl_student_temperature: float = 0.45
    kl_teacher_temperature: float = 0.5
    teacher_weights: tuple[float, ...] = (0.33, 0.67)
    """weights of the DALR text teachers (SimCSE 0.33, DiffCSE 0.67)"""
    teacher_temperature: float = 0.05
    rank_eps: float = 1e-7
    paper_reading: bool = False
    """True: formulas as the papers print them where they differ from the code"""

    def resolved(self) -> ObjectiveConfig:
        raise NotImplementedError

    def replace(self, **changes) -> ObjectiveConfig:
        return dataclasses.replace(self, **changes)


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


def compute_objective(
    cfg: ObjectiveConfig, student: StudentOutputs, teacher: TeacherInputs | None
) -> dict[str, torch.Tensor]:
    """Every named term and ``"total"``. ``teacher is None`` means a text-only batch."""
    raise NotImplementedError
