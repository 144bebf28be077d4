"""A search over SoftGround's own settings (examples/softground.py) against MCSE.

    python -m orchestrator.search --space examples/softground_search.py --num-samples 8

How to write one: docs/searching.md, "Writing a search space". The file's folder is on the import
path while it loads, so it imports the method beside it, as the grid does.
"""

import softground  # noqa: F401  (registers "softground")

from orchestrator.spec.spaces import FloatRange, SearchSpace

# Each range is a dotted setting and its bounds, checked when this file is imported.
ALPHA = FloatRange("objective.alpha", 0.0, 0.9)  # the share of the target spread; 0 = MCSE
TAU_T = FloatRange("objective.teacher_temperature", 0.02, 0.5, log=True)  # how sharply
LAM = FloatRange("objective.lam", 0.1, 10.0, log=True, relative=True)  # around the profile's


def define(trial):
    """One configuration: suggest each setting by its dotted name; return settings derived from
    them (none here)."""
    ALPHA.suggest(trial)
    TAU_T.suggest(trial)
    LAM.suggest(trial)
    return None


def start(cfg):
    """SoftGround as the profile trains it (its defaults and its demo recipe): tried first."""
    o = cfg.objective
    return {"objective.alpha": o.alpha, "objective.teacher_temperature": o.teacher_temperature,
            "objective.lam": o.lam}


SPACE = SearchSpace(
    name="softground_search",
    title="SoftGround search: alpha, tau_t (log), lambda (log) vs MCSE",
    base={"objective.method": "softground"},
    define=define,
    baseline={"objective.method": "mcse"},
    start=start,
    num_samples=8,
)
