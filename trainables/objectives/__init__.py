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

**This package is the import surface of a plug-in method** (docs/methods.md): every name a
method file needs comes from here, ``PLUGIN_API`` lists them, and a test keeps every name the
docs import. Where a name lives inside the package may change; ``from trainables.objectives
import ...`` does not (a module that moves keeps a forwarding name for a release,
``trainables.runtime.moved``).
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
    row_permutation,
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
    need,
    register,
    text_infonce,
)
from trainables.objectives.simcse import SimCSESettings
from trainables.runtime.checks import (
    FINITE,
    NON_NEGATIVE,
    POSITIVE,
    Check,
    Choice,
    Each,
    Flag,
    Number,
    Optional,
    Text,
    count,
    setting,
)

PLUGIN_API = (
    # what a method declares (trainables.objectives.methods)
    "Method", "Settings", "Needs", "Head", "HeadDims", "StudentOutputs", "TeacherInputs",
    "NegativeFilter", "StoreView", "register", "need", "text_infonce",
    # a setting and its check (trainables.runtime.checks)
    "setting", "Check", "POSITIVE", "NON_NEGATIVE", "FINITE", "Number", "Choice", "Flag", "Text",
    "Optional", "Each", "count",
    # the tensor helpers the built-in methods share (trainables.objectives.core)
    "cosine_matrix", "frozen_cosine", "frozen_dot", "frozen", "at_least_f32", "no_autocast",
    "diagonal_cross_entropy", "simcse_loss", "angular_margin_logits", "adapacse_loss",
    "mcse_grounding_loss", "threshold_bias", "safe_acos", "row_permutation",
    # running a method's loss outside a table (a test of a plug-in)
    "compute_objective", "load_methods",
)
"""every name a plug-in method file may import from ``trainables.objectives``; each stays"""

__all__ = [
    "PLUGIN_API",
    "FINITE",
    "NON_NEGATIVE",
    "POSITIVE",
    "Check",
    "Choice",
    "Each",
    "Flag",
    "Number",
    "Optional",
    "Text",
    "count",
    "need",
    "row_permutation",
    "setting",
    "text_infonce",
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
