"""Objectives as methods: pure loss math (torch only), one module per method, and the method API.

- ``methods``: the method API (what a method declares: settings, needs, heads, terms) and the
  registry (built-ins, a user's file or module, installed packages' entry points).
- ``core``: pieces every method shares (cosines, ArcSim margins, InfoNCE, threshold filter).
- ``grounding``: MCSE-style grounding (terms, settings, heads, store checks), MCSE's and KDMCSE's.
- ``simcse``, ``mcse``, ``kdmcse``, ``dalr``: the built-in methods, each its settings (defaults =
  the official code's values), needs, heads and terms as pure functions.
- ``composition``: ``compute_objective`` for any method, given that method's settings.

The submodules import each other directly, never through this package, which only re-exports
their public names.
"""

from trainables.objectives.composition import (
    METHODS,
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
    DALRSettings,
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
from trainables.objectives.grounding import kdmcse_grounding_terms, masked_fraction
from trainables.objectives.kdmcse import KDMCSESettings
from trainables.objectives.mcse import MCSESettings
from trainables.objectives.methods import (
    Head,
    HeadDims,
    Method,
    Needs,
    NegativeFilter,
    Settings,
    StoreView,
    StudentOutputs,
    TeacherInputs,
    load_methods,
    register,
)
from trainables.objectives.simcse import SimCSESettings

__all__ = [
    "FALSE_NEGATIVE_BIAS",
    "G2L_MASK",
    "METHODS",
    "DALRSettings",
    "Head",
    "HeadDims",
    "KDMCSESettings",
    "MCSESettings",
    "Method",
    "NegativeFilter",
    "Needs",
    "Settings",
    "SimCSESettings",
    "StoreView",
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
    "kl_distillation_loss",
    "listmle_loss",
    "load_methods",
    "masked_fraction",
    "mcse_grounding_loss",
    "no_autocast",
    "register",
    "safe_acos",
    "simcse_loss",
    "threshold_bias",
]
