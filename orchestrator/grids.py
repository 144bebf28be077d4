"""Grids and search spaces: what a paper table, figure or hyperparameter search runs.

A :class:`Grid` is a table or figure: named cells (the paper's rows), each a set of dotted
``RunConfig`` overrides, crossed with one seed list shared by every cell so the baseline comparison
is paired (papers.md, "Evaluation": five seeds, t-test against the baseline). :func:`expand` turns a
grid into :class:`Trial` s whose stable ``key`` drives resume bookkeeping. A :class:`SearchSpace` is
an Optuna define-by-run search plus a confirmation step on fresh seeds against the baseline.

Each grid or space lives in its own small module ``search_spaces/<name>.py`` (``GRID = Grid(...)`` or
``SPACE = SearchSpace(...)``); modules whose name starts with ``_`` are helpers, not entries.
Validation builds every cell's config with the demo profile, so a typo in an override key fails in
``--list`` / the test suite rather than hours into a run.
"""

from __future__ import annotations

import importlib
import math
import os
import pkgutil
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STS_COLUMNS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg")
PACKAGE = "search_spaces"

# DALR text teachers (papers.md "DALR", Table 9) under $MMEMB_DATA/teachers/, named as the paper
# profile names the default pair so the default combination hashes the same either way.
TEACHER_DIRS = {
    "simcse": "unsup-simcse-bert-base-uncased",
    "diffcse": "DiffCSE-bert-base-uncased",
    "rankcse": "RankCSE-listmle-bert-base-uncased",
    "clip": "clip-vit-large-patch14",
}
TEACHER_PARAM, ALPHA_PARAM = "teachers", "teacher_alpha"
DEFAULT_ALPHA = 0.33  # DALR code: SimCSE 0.33, DiffCSE 0.67 (methods.md 4.2)


class _ReadOnlyDict(dict):
    """A dict that refuses mutation but still pickles (Ray ships trials; a mappingproxy cannot)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("grid overrides are read-only; build a new Cell / Grid instead")

    __setitem__ = __delitem__ = __ior__ = _refuse  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_ReadOnlyDict, (dict(self),))


def _frozen(m: Mapping[str, Any]) -> Mapping[str, Any]:
    return _ReadOnlyDict(m)


@dataclass(frozen=True)
class Cell:
    """One row of a table (or one point of a figure)."""

    name: str
    overrides: Mapping[str, Any]
    """dotted RunConfig overrides; the merged base + cell always names ``objective.method``"""
    published: Mapping[str, float] = field(default_factory=dict)
    """metric -> the paper's number (keys among the grid's columns)"""
    x: float | None = None
    """sweep coordinate (figures)"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", _frozen(self.overrides))
        object.__setattr__(self, "published", _frozen(self.published))


@dataclass(frozen=True)
class Grid:
    name: str
    title: str
    cells: tuple[Cell, ...]
    baseline: str
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    columns: tuple[str, ...] = STS_COLUMNS
    base: Mapping[str, Any] = field(default_factory=dict)
    plot: str = "bars"
    xlabel: str | None = None
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", _frozen(self.base))
        object.__setattr__(self, "cells", tuple(self.cells))
        object.__setattr__(self, "seeds", tuple(self.seeds))

    def cell(self, name: str) -> Cell:
        for c in self.cells:
            if c.name == name:
                return c
        raise ValueError(f"grid {self.name!r} has no cell {name!r}; cells: {[c.name for c in self.cells]}")

    @property
    def published(self) -> dict[str, dict[str, float]]:
        """cell -> metric -> published value, the shape ``orchestrator.tables.analyze`` takes."""
        return {c.name: dict(c.published) for c in self.cells if c.published}


def slug(name: str) -> str:
    """'w/o AdapACSE' -> 'w-o-adapacse'; 'm=0.125' -> 'm-0.125' (file- and URL-safe)."""
    s = re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-.")
    return s or "cell"


@dataclass(frozen=True)
class Trial:
    grid: str
    cell: str
    seed: int
    overrides: Mapping[str, Any]
    """grid.base + cell.overrides + {"seed": seed}"""

    @property
    def key(self) -> str:
        return f"{slug(self.cell)}/seed-{self.seed}"


def expand(grid: Grid, seeds: Sequence[int] | None = None) -> list[Trial]:
    """Cells x seeds, the baseline's trials first; every cell gets the same seed list (paired)."""
    seeds = tuple(grid.seeds if seeds is None else seeds)
    _check_seeds(seeds, f"grid {grid.name!r}")
    order = [grid.cell(grid.baseline)] + [c for c in grid.cells if c.name != grid.baseline]
    return [
        Trial(grid.name, c.name, int(s), _frozen({**grid.base, **c.overrides, "seed": int(s)}))
        for c in order
        for s in seeds
    ]


def _check_seeds(seeds: Sequence[int], what: str) -> None:
    if not seeds or len(set(seeds)) != len(seeds) or not all(isinstance(s, int) for s in seeds):
        raise ValueError(f"{what}: seeds must be a non-empty list of distinct integers, got {tuple(seeds)}")


# --- ranges and choices (Optuna) -------------------------------------------------------------
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

    def __post_init__(self) -> None:
        check_range(self.name, self.low, self.high, self.log)

    def suggest(self, trial: Any) -> float:
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)


def check_choices(name: str, choices: Sequence[Any]) -> tuple[Any, ...]:
    """Optuna categorical choices must be distinct primitives (ecosystem.md 6): encode tuples as strings."""
    choices = tuple(choices)
    if not choices or len(set(choices)) != len(choices):
        raise ValueError(f"choice {name}: needs distinct options, got {choices}")
    bad = [c for c in choices if not (c is None or isinstance(c, bool | int | float | str))]
    if bad:
        raise ValueError(f"choice {name}: options must be None/bool/int/float/str, got {bad}; encode as strings")
    return choices


# --- teachers ------------------------------------------------------------------------------
def teacher_overrides(combo: str, alpha: float = DEFAULT_ALPHA, demo: bool = False) -> dict[str, Any]:
    """'simcse+diffcse' -> text_teachers (paths) + objective.teacher_weights (alpha, 1 - alpha).

    Paths are ``$MMEMB_DATA/teachers/<dir>`` as in the paper profile. ``demo=True`` maps every
    teacher to the one text teacher the demo ships (MiniLM-L6): the combination's structure and
    weights stay, the models collapse to one, so a search still runs end to end on a laptop.
    """
    names = combo.split("+")
    unknown = [n for n in names if n not in TEACHER_DIRS]
    if unknown or not 1 <= len(names) <= 2:
        raise ValueError(f"teacher combination {combo!r}: use one or two of {sorted(TEACHER_DIRS)} joined by '+'")
    if len(names) == 2 and not 0.0 < alpha < 1.0:
        raise ValueError(f"teacher_alpha={alpha} must lie in (0, 1) (weight of {names[0]})")
    if demo:
        from trainables.profiles import MINILM

        paths = [MINILM] * len(names)
    else:
        root = Path(os.environ.get("MMEMB_DATA", "data")) / "teachers"
        paths = [str(root / TEACHER_DIRS[n]) for n in names]
    weights = [1.0] if len(names) == 1 else [alpha, round(1.0 - alpha, 10)]
    return {"text_teachers": paths, "objective.teacher_weights": weights}


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", _frozen(self.base))
        object.__setattr__(self, "baseline", _frozen(self.baseline))


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
            derived = dict(space.define(fixed) or {})
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
        from trainables.profiles import profile_overrides

        demo = bool(profile_overrides(profile)[1].get("data.demo"))
        out.update(teacher_overrides(sampled[TEACHER_PARAM], sampled.get(ALPHA_PARAM, DEFAULT_ALPHA), demo))
    out.update(derived)
    return out


# --- registry ------------------------------------------------------------------------------
def _entries() -> tuple[dict[str, Any], dict[str, Any]]:
    pkg = importlib.import_module(PACKAGE)
    grids: dict[str, Any] = {}
    spaces: dict[str, Any] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{PACKAGE}.{info.name}")
        if hasattr(mod, "GRID"):
            grids[info.name] = mod
        elif hasattr(mod, "SPACE"):
            spaces[info.name] = mod
    return grids, spaces


def _get(name: str, kind: str) -> Any:
    grids, spaces = _entries()
    mine, other = (grids, spaces) if kind == "grid" else (spaces, grids)
    if name not in mine:
        hint = f" ({name!r} is a {'search' if kind == 'grid' else 'grid'})" if name in other else ""
        raise ValueError(f"unknown {kind} {name!r}{hint}; known {'searches' if kind == 'search' else 'grids'}: {', '.join(mine) or 'none'}")
    obj = mine[name].GRID if kind == "grid" else mine[name].SPACE
    if obj.name != name:
        raise ValueError(f"{PACKAGE}/{name}.py defines {kind} named {obj.name!r}; name it {name!r}")
    return obj


def load_grid(name: str) -> Grid:
    """A grid of ``search_spaces/`` by name, or ``GRID`` of a Python file (your own table)."""
    if name.endswith(".py"):
        return _from_file(name, "GRID")
    return _get(name, "grid")


def _from_file(path: str, attr: str) -> Any:
    import importlib.util

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"grid file {p} does not exist; pass a grid name (see --list) or a .py file")
    spec = importlib.util.spec_from_file_location(f"_mmemb_user_{p.stem}", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    if not hasattr(mod, attr):
        raise ValueError(f"{p} defines no {attr}; declare {attr} = Grid(...) as search_spaces/ do")
    return getattr(mod, attr)


def load_space(name: str) -> SearchSpace:
    return _get(name, "search")


def list_grids() -> list[tuple[str, str]]:
    """(name, one-line description) per grid, sorted by name."""
    return [(n, m.GRID.title) for n, m in _entries()[0].items()]


def list_spaces() -> list[tuple[str, str]]:
    return [(n, m.SPACE.title) for n, m in _entries()[1].items()]


def list_text() -> str:
    """The ``--list`` text: one line per grid, then one per search."""
    lines = []
    for name, _ in list_grids():
        g = load_grid(name)
        size = f"{len(g.cells)} cells x {len(g.seeds)} seeds"
        lines.append(f"grid    {name:<16} {size:<24} {g.title}")
    for name, _ in list_spaces():
        s = load_space(name)
        size = f"{s.num_samples} samples + {len(s.confirm_seeds)} seeds"
        lines.append(f"search  {name:<16} {size:<24} {s.title}")
    return "\n".join(lines)


# --- validation ----------------------------------------------------------------------------
def _demo_build(overrides: Mapping[str, Any]) -> Any:
    from trainables.profiles import build_config

    return build_config("demo", overrides=dict(overrides))


def validate_grid(grid: Grid, build: Callable[[Mapping[str, Any]], Any] = _demo_build) -> None:
    """Every cell builds a valid RunConfig; names, baseline, seeds, published keys and sweep are sane."""
    where = f"grid {grid.name!r}"
    names = [c.name for c in grid.cells]
    if not names:
        raise ValueError(f"{where} has no cells")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{where}: duplicate cell names {dup}")
    slugs = [slug(n) for n in names]
    if len(set(slugs)) != len(slugs):
        raise ValueError(f"{where}: cell names {names} collide as trial keys {slugs}; rename one")
    if grid.baseline not in names:
        raise ValueError(f"{where}: baseline {grid.baseline!r} is not a cell ({names})")
    _check_seeds(grid.seeds, where)
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
            if m not in grid.columns or not math.isfinite(v):
                raise ValueError(f"{where} cell {c.name!r}: published {m}={v} must be finite, keyed by a column {grid.columns}")
        try:
            _check_teachers(build({**merged, "seed": grid.seeds[0]}))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{where} cell {c.name!r}: {e}") from None


def _check_teachers(cfg: Any) -> None:
    # The loop checks this only when it loads the teachers, i.e. minutes into a run.
    if cfg is None:  # a custom ``build`` that only checks overrides
        return
    n, w = len(cfg.text_teachers), len(cfg.objective.teacher_weights)
    if cfg.objective.method == "dalr" and n != w:
        raise ValueError(f"{n} text_teachers but {w} objective.teacher_weights; give one weight per teacher")


def validate_space(space: SearchSpace, samples: int = 4, build: Callable[[Mapping[str, Any]], Any] = _demo_build) -> None:
    """Base, baseline and a few random draws of the space all build valid demo RunConfigs."""
    import optuna

    where = f"search {space.name!r}"
    if "objective.method" not in space.base or "objective.method" not in space.baseline:
        raise ValueError(f"{where}: base and baseline must name objective.method")
    if space.mode not in ("min", "max") or space.num_samples < 1:
        raise ValueError(f"{where}: mode must be min/max and num_samples >= 1")
    _check_seeds(space.confirm_seeds, where)
    build(dict(space.baseline))
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
        for _ in range(samples):
            t = study.ask()
            space.define(t)
            for name, d in t.distributions.items():
                if isinstance(d, optuna.distributions.CategoricalDistribution):
                    check_choices(name, d.choices)
            try:
                _check_teachers(build(params_to_overrides(space, t.params, profile="demo")))
            except (ValueError, TypeError) as e:
                raise ValueError(f"{where} params {t.params}: {e}") from None
    finally:
        optuna.logging.set_verbosity(level)
