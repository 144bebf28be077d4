"""KDMCSE search: AdapACSE margin, threshold filter (value or off) and lambda (log), vs MCSE."""

from orchestrator.spec.spaces import FloatRange, SearchSpace, check_choices
from search_spaces._common import MCSE

MARGIN = FloatRange("objective.grounding_margin", 0.025, 0.225)  # KDMCSE Figure 7's range
THRESHOLD = FloatRange("objective.threshold", 0.6, 0.95)  # paper: 0.85-0.9; script: 0.8
LAM = FloatRange("objective.lam", 1e-3, 1e-1, log=True)  # code: 0.01
FILTER = check_choices("threshold_filter", ("on", "off"))


def define(trial):
    MARGIN.suggest(trial)
    LAM.suggest(trial)
    if trial.suggest_categorical("threshold_filter", FILTER) == "on":
        THRESHOLD.suggest(trial)
        return None
    return {"objective.threshold": None}


SPACE = SearchSpace(
    name="kdmcse_search",
    title="KDMCSE search: margin, threshold/off, lambda (log) vs MCSE",
    base={"objective.method": "kdmcse"},
    define=define,
    baseline=MCSE,
)
