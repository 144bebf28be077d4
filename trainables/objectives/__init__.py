"""Objectives of SimCSE, MCSE, KDMCSE and DALR: pure loss math (torch only) and its composition.

- ``core``: pieces every method shares (cosines, ArcSim margins, InfoNCE, threshold filter).
- ``kdmcse``: KDMCSE's two grounding terms.
- ``dalr``: DALR's terms and teacher combinations.
- ``composition``: ``ObjectiveConfig`` and ``compute_objective``, which add the terms up per method.

The submodules import each other directly (core <- kdmcse, dalr <- composition), never through
this package, which only re-exports their public names.
"""

from trainables.objectives.composition import (
    METHODS,
    ObjectiveConfig,
    StudentOutputs,
    TeacherInputs,
    compute_objective,
)
from trainables.objectives.core import (
    FALSE_NEGATIVE_BIAS,
    adapacse_loss,
    angular_margin_logits,
    at_least_f32,
    cosine_matrix,
    diagonal_cross_entropy,
    frozen,
    frozen_cosine,
    frozen_dot,
    mcse_grounding_loss,
    no_autocast,
    safe_acos,
    simcse_loss,
    threshold_bias,
)
from trainables.objectives.dalr import (
    G2L_MASK,
    dalr_cma_loss,
    dalr_consistency_loss,
    dalr_global_local_loss,
    dalr_ima_loss,
    dalr_teacher_embedding,
    dalr_teacher_local,
    dalr_teacher_scores,
    kl_distillation_loss,
    listmle_loss,
)
from trainables.objectives.kdmcse import kdmcse_grounding_terms, masked_fraction

__all__ = [
    "FALSE_NEGATIVE_BIAS",
    "G2L_MASK",
    "METHODS",
    "ObjectiveConfig",
    "StudentOutputs",
    "TeacherInputs",
    "adapacse_loss",
    "angular_margin_logits",
    "at_least_f32",
    "compute_objective",
    "cosine_matrix",
    "dalr_cma_loss",
    "dalr_consistency_loss",
    "dalr_global_local_loss",
    "dalr_ima_loss",
    "dalr_teacher_embedding",
    "dalr_teacher_local",
    "dalr_teacher_scores",
    "diagonal_cross_entropy",
    "frozen",
    "frozen_cosine",
    "frozen_dot",
    "kdmcse_grounding_terms",
    "masked_fraction",
    "kl_distillation_loss",
    "listmle_loss",
    "mcse_grounding_loss",
    "no_autocast",
    "safe_acos",
    "simcse_loss",
    "threshold_bias",
]
