"""KDMCSE search: AdapACSE margin, threshold filter (value or off) and lambda (log), vs MCSE.

Lambda is searched relative to the profile's own value (a tenth to ten times it): 0.001-0.1
around the code's 0.01 on the paper profile, 0.1-10 around the demo's 1.0 (the method's demo recipe), so
the range holds the lambda the baseline trains with. The search starts from KDMCSE as the profile
trains it (``start``), so its winner is selected against that configuration.
"""

from orchestrator.spec.spaces import FloatRange, SearchSpace, check_choices
from search_spaces._common import MCSE

MARGIN = FloatRange("objective.grounding_margin", 0.025, 0.225)  # KDMCSE Figure 7's range
THRESHOLD = FloatRange("objective.threshold", 0.6, 0.95)  # paper: 0.85-0.9; script: 0.8
LAM = FloatRange("objective.lam", 0.1, 10.0, log=True, relative=True)  # code: 0.01; demo: 1.0
FILTER = check_choices("threshold_filter", ("on", "off"))


def define(trial):
    MARGIN.suggest(trial)
    LAM.suggest(trial)
    if trial.suggest_categorical("threshold_filter", FILTER) == "on":
        THRESHOLD.suggest(trial)
        return None
    return {"objective.threshold": None}


def start(cfg):
    """KDMCSE as the profile trains it."""
    o = cfg.objective
    on = o.threshold is not None
    return {"objective.grounding_margin": o.grounding_margin, "objective.lam": o.lam,
            "threshold_filter": "on" if on else "off", **({"objective.threshold": o.threshold}
                                                           if on else {})}


SPACE = SearchSpace(
    name="kdmcse_search",
    title="KDMCSE search: margin, threshold/off, lambda (log) vs MCSE",
    base={"objective.method": "kdmcse"},
    define=define,
    baseline=MCSE,
    start=start,
)
