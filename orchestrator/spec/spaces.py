"""Searches: an Optuna define-by-run space, what it starts from, and the baseline it must beat.

A :class:`SearchSpace` lives in ``search_spaces/<name>.py`` (``SPACE = SearchSpace(...)``).
Ranges are checked when the module is imported (:class:`FloatRange`, :func:`check_choices`), so a
nonsense range fails at once and names its file (``orchestrator.spec.registry``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.spec.grids import frozen_mapping
from trainables.config.profiles import ALPHA_PARAM, DEFAULT_ALPHA, TEACHER_PARAM, teacher_overrides


def check_range(name: str, low: float, high: float, log: bool = False) -> None:
    """Raise one clear line for a nonsense search range (at definition time, not mid-search)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"range {name}: bounds must be finite, got [{low}, {high}]")
    if low > high:
        raise ValueError(f"range {name}: low={low} > high={high}; swap the bounds")
    if log and low <= 0:
        raise ValueError(f"range {name}: a log-scale range needs low > 0, got low={low}")


@dataclass(frozen=True)
class FloatRange:
    """A float search range checked when the search-space module is imported."""

    name: str
    low: float
    high: float
    log: bool = False
    relative: bool = False
    """``low`` and ``high`` are factors of the setting's value on the profile the search runs on
    (the space's base there, recipe included): ``FloatRange("objective.lam", 0.1, 10,
    relative=True)`` searches 0.001-0.1 around the paper's lambda 0.01 and 0.1-10 around the
    demo's 1.0, so the range always holds the profile's own working value"""

    def __post_init__(self) -> None:
        check_range(self.name, self.low, self.high, self.log)
        if self.relative and self.low <= 0:
            raise ValueError(f"range {self.name}: relative factors must be > 0, got low={self.low}")

    def bounds(self, trial: Any) -> tuple[float, float]:
        if not self.relative:
            return self.low, self.high
        ref = getattr(trial, "reference", None)
        if ref is None:
            raise ValueError(f"range {self.name} is relative to the profile's value: call the "
                             "space's define through orchestrator.spec.spaces.define_on")
        value = ref.get(self.name)
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"range {self.name} is relative to the profile's value, which is "
                             f"{value!r}; give the space absolute bounds for it")
        return self.low * value, self.high * value

    def suggest(self, trial: Any) -> float:
        low, high = self.bounds(trial)
        return trial.suggest_float(self.name, low, high, log=self.log)


class ProfileTrial:
    """An Optuna trial that also carries ``reference``, the settings of the space's base on the
    profile the search runs on: what a relative :class:`FloatRange` scales by."""

    def __init__(self, trial: Any, reference: Mapping[str, Any]):
        self._trial, self.reference = trial, reference

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trial, name)


def reference(space: SearchSpace, profile: str | None) -> dict[str, Any]:
    """The dotted settings of ``space.base`` built on ``profile`` (its recipe included)."""
    from trainables.config.profiles import build_config
    from trainables.config.run_config import flatten

    return flatten(build_config(profile, overrides=dict(space.base)).to_dict())


def define_on(space: SearchSpace, trial: Any, profile: str | None,
              ref: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``space.define(trial)`` on ``profile``: relative ranges scaled by its values (``ref``,
    when the caller has computed :func:`reference` already)."""
    return dict(space.define(ProfileTrial(trial, reference(space, profile) if ref is None
                                          else ref)) or {})


def searched_keys(space: SearchSpace, profile: str | None, draws: int = 8) -> set[str]:
    """The dotted settings a search varies: what ``define`` asks for in a few random draws (and
    the keys it derives from them)."""
    import optuna

    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    keys: set[str] = set()
    ref = reference(space, profile)
    try:
        for i in range(draws):
            t = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=i)).ask()
            keys |= set(define_on(space, t, profile, ref)) | set(t.params)
    finally:
        optuna.logging.set_verbosity(level)
    return {k for k in keys if "." in k}


def check_choices(name: str, choices: Sequence[Any]) -> tuple[Any, ...]:
    """Optuna categorical choices must be distinct primitives : encode tuples as strings."""
    choices = tuple(choices)
    if not choices or len(set(choices)) != len(choices):
        raise ValueError(f"choice {name}: needs distinct options, got {choices}")
    bad = [c for c in choices if not (c is None or isinstance(c, bool | int | float | str))]
    if bad:
        raise ValueError(f"choice {name}: options must be None/bool/int/float/str, got {bad}; encode as strings")
    return choices


# --- searches ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchSpace:
    """A define-by-run Optuna search; the best point is then re-run on fresh seeds vs the baseline.

    ``define(trial)`` suggests parameters whose names are dotted RunConfig keys (the value "off"
    means None), or the reserved ``teachers`` (a combination string, see :func:`teacher_overrides`)
    and ``teacher_alpha``; it returns overrides derived from them (or None).
    """

    name: str
    title: str
    base: Mapping[str, Any]
    define: Callable[[Any], Mapping[str, Any] | None]
    baseline: Mapping[str, Any]
    metric: str = "best_stsb_dev"
    mode: str = "max"
    num_samples: int = 20
    confirm_seeds: tuple[int, ...] = (100, 101, 102, 103, 104)
    start: Callable[[Any], Mapping[str, Any]] | None = None
    """the params of the profile's own configuration (given the RunConfig of ``base`` on it),
    tried first: the search then starts from the recipe it is to improve on"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", frozen_mapping(self.base))
        object.__setattr__(self, "baseline", frozen_mapping(self.baseline))


def params_to_overrides(space: SearchSpace, params: Mapping[str, Any], profile: str | None = None) -> dict[str, Any]:
    """Optuna's flat params (or a Tune config holding them) -> dotted RunConfig overrides.

    ``define`` is replayed on the fixed params, so decoding can never drift from what was sampled;
    out-of-range or unknown params raise. ``profile`` is the one the trial is built with (as in
    ``build_config``): it decides where teacher names point.
    """
    import optuna

    fixed = optuna.trial.FixedTrial(dict(params))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            derived = define_on(space, fixed, profile)
        except ValueError as e:
            raise ValueError(f"search {space.name!r}: params {dict(params)} do not fit its space ({e})") from None
    for w in caught:
        if "out of the range" in str(w.message):
            raise ValueError(f"search {space.name!r}: {w.message}")
    sampled = fixed.params
    for k in set(params) - set(sampled):
        if k not in derived:
            raise ValueError(f"search {space.name!r}: param {k!r} is not in its space ({sorted(sampled)})")
        if params[k] != derived[k]:
            raise ValueError(f"search {space.name!r}: {k}={params[k]!r} contradicts derived {derived[k]!r}")
    out = dict(space.base)
    for k, v in sampled.items():
        if "." in k:
            out[k] = None if v == "off" else v
    if TEACHER_PARAM in sampled:
        from trainables.config.profiles import profile_overrides

        demo = bool(profile_overrides(profile)[1].get("data.demo"))
        out.update(teacher_overrides(sampled[TEACHER_PARAM], sampled.get(ALPHA_PARAM, DEFAULT_ALPHA), demo))
    out.update(derived)
    return out
