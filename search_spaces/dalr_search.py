"""DALR search: lambda (log), mu, one angular margin (m1 = m2) and the text-teacher combination.

Lambda is searched relative to the profile's own value (a tenth to ten times the code's 0.1),
and the search starts from the code's configuration (``start``).
"""

from orchestrator.spec.spaces import FloatRange, SearchSpace, check_choices
from search_spaces._common import DALR, MCSE
from trainables.config.profiles import ALPHA_PARAM, TEACHER_PARAM

LAM = FloatRange("objective.lam", 0.1, 10.0, log=True, relative=True)  # code: 0.1
MU = FloatRange("objective.mu", 0.05, 1.0)  # code: 0.2
MARGIN = FloatRange("margin", 0.05, 0.3)  # code: m1 = m2 = 0.18
ALPHA = FloatRange(ALPHA_PARAM, 0.1, 0.9)  # weight of the first teacher (code: 0.33)
TEACHERS = check_choices(TEACHER_PARAM, ("simcse+diffcse", "simcse+rankcse", "simcse", "diffcse", "clip"))


def define(trial):
    LAM.suggest(trial)
    MU.suggest(trial)
    m = MARGIN.suggest(trial)
    if "+" in trial.suggest_categorical(TEACHER_PARAM, TEACHERS):
        ALPHA.suggest(trial)
    return {"objective.text_margin": m, "objective.grounding_margin": m}


def start(cfg):
    """DALR as the profile trains it: its lambda, mu and margin; the code's SimCSE + DiffCSE
    teachers at its weights (the demo, which ships one text teacher: that one alone)."""
    o = cfg.objective
    if len(cfg.text_teachers) == 1:
        return {"objective.lam": o.lam, "objective.mu": o.mu, "margin": o.text_margin,
                TEACHER_PARAM: "simcse"}
    return {"objective.lam": o.lam, "objective.mu": o.mu, "margin": o.text_margin,
            TEACHER_PARAM: "simcse+diffcse", ALPHA_PARAM: o.teacher_weights[0]}


SPACE = SearchSpace(
    name="dalr_search",
    title="DALR search: lambda (log), mu, margin, text-teacher combination vs MCSE",
    base=DALR,
    define=define,
    baseline=MCSE,
    start=start,
)
