"""Checks of grids and searches that need no data: every cell builds a valid run config."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.spec.grids import Grid, check_seeds, slug
from orchestrator.spec.spaces import (
    SearchSpace,
    check_choices,
    define_on,
    params_to_overrides,
    reference,
)


def _demo_build(overrides: Mapping[str, Any]) -> Any:
    from trainables.config.profiles import build_config

    return build_config("demo", overrides=dict(overrides))


NAME_LIMIT = 100
"""the longest grid or cell name: it becomes a member key, a run name and folder names"""


def check_name(name: object, what: str) -> None:
    """A grid, cell or search name is printable text: it heads a report column and names MLflow
    runs, so a blank one (an empty column header), one holding a line break, a NUL or another
    control character (a report row cut in two, a name no terminal shows) or one with spaces at
    either end (``--cells A`` would not find ``'A '``) cannot mean what it says."""
    import unicodedata

    if not isinstance(name, str):
        raise ValueError(f"{what} {name!r} must be a string")
    if not name.strip():
        raise ValueError(f"{what} {name!r} is blank; a name heads a report column and names "
                         "MLflow runs: give it visible text (rename it in the grid file)")
    bad = sorted({c for c in name if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise ValueError(f"{what} {name!r} holds control characters ({shown}); a name heads a "
                         "report column and names MLflow runs and folders: use printable text "
                         "(rename it in the grid file)")
    if name != name.strip():
        raise ValueError(f"{what} {name!r} starts or ends with a space, so --cells and the report "
                         f"would not find it as {name.strip()!r}; remove the spaces (rename it in "
                         "the grid file)")


def validate_grid(grid: Grid, build: Callable[[Mapping[str, Any]], Any] = _demo_build) -> None:
    """Every cell builds a valid RunConfig; names, baseline, seeds, published keys and sweep are sane."""
    where = f"grid {grid.name!r}"
    names = [c.name for c in grid.cells]
    if not names:
        raise ValueError(f"{where} has no cells")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{where}: duplicate cell names {dup}")
    for n in [grid.name, *names]:  # they name MLflow runs, trial keys and checkpoint folders
        check_name(n, f"{where}: {'its name' if n is grid.name else 'cell'}")
        if len(n) > NAME_LIMIT:
            what = "its name" if n == grid.name else f"cell {n[:40]!r}..."
            raise ValueError(f"{where}: {what} is {len(n)} characters; names become MLflow run "
                             f"names and folder names: keep each to {NAME_LIMIT} characters or "
                             "fewer (rename it in the grid file)")
    slugs = [slug(n) for n in names]
    if len(set(slugs)) != len(slugs):
        raise ValueError(f"{where}: cell names {names} collide as trial keys {slugs}; rename one")
    if grid.baseline not in names:
        raise ValueError(f"{where}: baseline {grid.baseline!r} is not a cell ({names})")
    check_seeds(grid.seeds, f"{where}: seeds")
    if grid.plot not in ("bars", "sweep"):
        raise ValueError(f"{where}: plot={grid.plot!r}; use 'bars' or 'sweep'")
    if grid.plot == "sweep":
        xs = [c.x for c in grid.cells if c.name != grid.baseline or c.x is not None]
        if any(x is None for x in xs) or len(set(xs)) != len(xs) or not grid.xlabel:
            raise ValueError(f"{where}: a sweep needs xlabel and a distinct x on every non-baseline cell")
    for c in grid.cells:
        merged = {**grid.base, **c.overrides}
        if "objective.method" not in merged:
            raise ValueError(f"{where} cell {c.name!r}: overrides must name objective.method")
        for m, v in c.published.items():
            if m not in grid.report_columns or not math.isfinite(v):
                raise ValueError(f"{where} cell {c.name!r}: published {m}={v} must be finite, keyed "
                                 f"by a column {grid.report_columns}"
                                 + ("" if grid.transfer or not m.startswith("transfer/") else
                                    " (a transfer column needs transfer=True)"))
        try:
            _check_teachers(build({**merged, "seed": grid.seeds[0]}))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{where} cell {c.name!r}: {e}") from None


def _check_teachers(cfg: Any) -> None:
    # The loop checks this only when it loads the teachers, i.e. minutes into a run.
    if cfg is None:  # a custom ``build`` that only checks overrides
        return
    needs = cfg.needs
    n = len(cfg.text_teachers)
    if needs.text_teachers and needs.teacher_weights is not None and n != len(needs.teacher_weights):
        raise ValueError(f"{n} text_teachers but {len(needs.teacher_weights)} "
                         "objective.teacher_weights; give one weight per teacher")


def validate_space(space: SearchSpace, samples: int = 4,
                   build: Callable[[Mapping[str, Any]], Any] = _demo_build,
                   exhaustive: bool = False, profile: str | None = "demo") -> None:
    """Base, baseline and a few random draws of the space all build valid RunConfigs.

    ``exhaustive``: also every option of every categorical parameter (each forced once, the rest
    random), so an option that would fail (an unknown teacher) is found before the search, not
    when TPE happens to sample it.
    """
    import optuna

    where = f"search {space.name!r}"
    check_name(space.name, f"{where}: its name")
    if "objective.method" not in space.base or "objective.method" not in space.baseline:
        raise ValueError(f"{where}: base and baseline must name objective.method")
    if space.mode not in ("min", "max") or space.num_samples < 1:
        raise ValueError(f"{where}: mode must be min/max and num_samples >= 1")
    check_seeds(space.confirm_seeds, f"{where}: confirm_seeds", least=2)
    build(dict(space.baseline))
    import warnings

    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    choices: dict[str, tuple] = {}
    seen_with: dict[str, dict[str, Any]] = {}
    """categorical -> the params of a draw that reached it (a conditional one needs its parents)"""

    ref = reference(space, profile)

    widths: dict[str, str] = {}
    """parameter -> its span where the search cannot choose it ('1.0 to 1.0'), else ''"""

    def draw(sampler) -> None:
        t = optuna.create_study(direction="maximize", sampler=sampler).ask()
        define_on(space, t, profile, ref)
        for name, d in t.distributions.items():
            if widths.get(name, "x"):
                widths[name] = _no_choice(d)
            if isinstance(d, optuna.distributions.CategoricalDistribution):
                choices[name] = check_choices(name, d.choices)
                seen_with.setdefault(name, dict(t.params))
        try:
            _check_teachers(build(params_to_overrides(space, t.params, profile=profile)))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{where} params {t.params}: {e}") from None

    if space.start is not None:  # the profile's own point must lie in the space
        start = dict(space.start(build(dict(space.base))))
        try:
            _check_teachers(build(params_to_overrides(space, start, profile=profile)))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{where}: its start {start} on profile {profile}: {e}") from None
    try:
        for i in range(samples):
            draw(optuna.samplers.RandomSampler(seed=i))
        done: set[tuple[str, Any]] = set()
        while exhaustive:  # until no new (parameter, option) pair turns up
            todo = [(n, c) for n, cs in choices.items() for c in cs if (n, c) not in done]
            if not todo:
                break
            for n, c in todo:
                done.add((n, c))
                fixed = {**seen_with[n], n: c}  # the draw's path to n, so n is asked again
                draw(optuna.samplers.PartialFixedSampler(fixed, optuna.samplers.RandomSampler(seed=0)))
    finally:
        optuna.logging.set_verbosity(level)
    if widths and all(widths.values()):  # every draw the same point: nothing to search
        said = "; ".join(f"{n} is {w}" for n, w in widths.items())
        its = "its only range" if len(widths) == 1 else "each of its ranges"
        raise ValueError(f"{where}: {its} has no width ({said}), so every draw is the same "
                         "point and the search cannot choose anything; widen the range (low < "
                         "high), or put that value in the space's base and run it as a table")


def _no_choice(d: Any) -> str:
    """A distribution that leaves one value: its span in words ('1.0 to 1.0'), else ''."""
    import optuna

    if isinstance(d, optuna.distributions.CategoricalDistribution):
        return f"one option {d.choices[0]!r}" if len(d.choices) == 1 else ""
    low, high = getattr(d, "low", None), getattr(d, "high", None)
    return f"{low} to {high}" if low is not None and low == high else ""
