"""Moved: ``trainables.runtime.checks`` now (a plug-in imports ``setting`` and the checks from
``trainables.objectives``, docs/methods.md). This forwarding name keeps the import printed by
earlier docs working for one release, and warns once (``trainables.runtime.moved``)."""

from trainables.runtime.checks import (  # noqa: F401  (re-exported)
    FINITE,
    KEY,
    NON_NEGATIVE,
    POSITIVE,
    SEED,
    Check,
    Choice,
    Each,
    Flag,
    Nested,
    Number,
    Optional,
    Text,
    check_fields,
    count,
    field_check,
    leaf_fields,
    setting,
)
from trainables.runtime.moved import moved

moved(__name__, "trainables.objectives",
      "from trainables.objectives import setting, POSITIVE, NON_NEGATIVE, Number, ...")
