"""The nine DALR loss ablations (DALR Tables 3 and 8) as objective switches.

L_CML = L_cons + L_CMA and L_IML = L_rank + L_IMA (DALR paper Eq. 14). The code-only global-local
term g2l is summed into the rank loss (docs/official-code.md §6.3), so it goes wherever L_rank goes.
"""

from __future__ import annotations

from search_spaces._common import DALR

_OFF = {
    "DALR": (),
    "w/o L_Info": ("use_info",),
    "w/o L_CML": ("use_consistency", "use_cma"),
    "w/o L_consistency": ("use_consistency",),
    "w/o L_CMA": ("use_cma",),
    "w/o L_IML": ("use_rank", "use_g2l", "use_ima"),
    "w/o L_rank": ("use_rank", "use_g2l"),
    "w/o L_IMA": ("use_ima",),
    "w/o L_IML & L_CML": ("use_consistency", "use_cma", "use_rank", "use_g2l", "use_ima"),
}


def ablation(name: str) -> dict[str, object]:
    return {**DALR, **{f"objective.{s}": False for s in _OFF[name]}}


NAMES = tuple(_OFF)
