"""The grid language: what a paper table or figure runs.

A :class:`Grid` is a table or figure: named cells (the paper's rows), each a set of dotted
``RunConfig`` overrides, crossed with one seed list shared by every cell so the baseline comparison
is paired (the papers report five seeds and a t-test against the baseline). :func:`expand` turns
a grid into :class:`RunSpec` s whose stable ``key`` drives resume bookkeeping.

Each grid lives in its own small module ``search_spaces/<name>.py`` (``GRID = Grid(...)``), stating
only what differs; ``orchestrator.spec.registry`` finds them and ``orchestrator.spec.validate`` checks them.
Searches are ``orchestrator.spec.spaces``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainables.evaluation.sts import ALL_TASKS

STS_COLUMNS = (*ALL_TASKS, "avg")
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
"""SentEval's transfer tasks in the papers' column order (``trainables.evaluation.transfer.TRANSFER_TASKS``,
named here so a grid is read without importing torch)"""
TRANSFER_COLUMNS = (*(f"transfer/{t}" for t in TRANSFER_TASKS), "transfer/avg")
"""the TR table's columns: accuracy x 100 per task and their mean (DALR's TR Avg)"""


class _ReadOnlyDict(dict):
    """A dict that refuses mutation but still pickles (Ray ships trials; a mappingproxy cannot)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("grid overrides are read-only; build a new Cell / Grid instead")

    __setitem__ = __delitem__ = __ior__ = _refuse  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_ReadOnlyDict, (dict(self),))


def frozen_mapping(m: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy of ``m`` that still pickles."""
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
    seed_offset: int = 0
    """the cell's runs use seed + offset: a negative control compares one config on disjoint
    seeds. Keys and pairing keep the grid's seed."""

    def __post_init__(self) -> None:
        if not isinstance(self.seed_offset, int) or isinstance(self.seed_offset, bool):
            raise ValueError(f"cell {self.name!r}: seed_offset must be an int, got {self.seed_offset!r}")
        object.__setattr__(self, "overrides", frozen_mapping(self.overrides))
        object.__setattr__(self, "published", frozen_mapping(self.published))


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
    transfer: bool = False
    """the table reports SentEval's transfer tasks (TR, DALR Tables 2, 3): its runs evaluate them
    at the end (``trainables.config.profiles.transfer_layer`` says how, per profile) and the report adds
    the TR table; published TR numbers are keyed by ``TRANSFER_COLUMNS``"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", frozen_mapping(self.base))
        object.__setattr__(self, "cells", tuple(self.cells))
        object.__setattr__(self, "seeds", tuple(self.seeds))

    def cell(self, name: str) -> Cell:
        for c in self.cells:
            if c.name == name:
                return c
        raise ValueError(f"grid {self.name!r} has no cell {name!r}; cells: {[c.name for c in self.cells]}")

    @property
    def report_columns(self) -> tuple[str, ...]:
        """Every column the report shows: the STS columns, then TR's when the table reports it."""
        return (*self.columns, *(TRANSFER_COLUMNS if self.transfer else ()))

    @property
    def published(self) -> dict[str, dict[str, float]]:
        """cell -> metric -> published value, the shape ``orchestrator.analysis.tables.analyze`` takes."""
        return {c.name: dict(c.published) for c in self.cells if c.published}


def slug(name: str) -> str:
    """'w/o AdapACSE' -> 'w-o-adapacse'; 'm=0.125' -> 'm-0.125' (file- and URL-safe)."""
    s = re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-.")
    return s or "cell"


def path_part(name: str, limit: int = 80) -> str:
    """A name as one safe path component: letters, digits, ``_ . -``; never empty, ``.`` or
    ``..``, never a separator. A name that had to change (``../../evil``) gets a short hash of
    the original, so two names never share a folder. Names that are already safe
    (``kdmcse_table3``) come back unchanged, so existing checkpoint folders keep their names."""
    import hashlib

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:limit].strip("-.")
    if safe == name:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{safe}-{digest}" if safe else f"name-{digest}"


@dataclass(frozen=True)
class RunSpec:
    grid: str
    cell: str
    seed: int
    """the grid's seed: the trial key and the pairing with the baseline"""
    overrides: Mapping[str, Any]
    """grid.base + cell.overrides + {"seed": seed + cell.seed_offset}"""

    @property
    def key(self) -> str:
        return f"{slug(self.cell)}/seed-{self.seed}"


def expand(grid: Grid, seeds: Sequence[int] | None = None) -> list[RunSpec]:
    """Cells x seeds, the baseline's trials first; every cell gets the same seed list (paired).
    A cell's ``seed_offset`` moves the seed its runs train with, not its key or pairing."""
    seeds = tuple(grid.seeds if seeds is None else seeds)
    check_seeds(seeds, f"grid {grid.name!r}: seeds")
    order = [grid.cell(grid.baseline)] + [c for c in grid.cells if c.name != grid.baseline]
    return [
        RunSpec(grid.name, c.name, int(s),
              frozen_mapping({**grid.base, **c.overrides, "seed": int(s) + c.seed_offset}))
        for c in order
        for s in seeds
    ]


def check_seeds(seeds: Sequence[int], where: str, least: int = 1) -> str:
    """The one seed rule, for grid files and command lines: integers >= 0 (numpy and torch refuse
    negative seeds), each once, at least ``least`` (a table's mean +- std and t-tests need 2).
    Returns the line ``--dry-run`` prints."""
    vals = list(seeds)
    shown = " ".join(map(str, vals)) or "(none)"
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in vals):
        raise ValueError(f"{where} {shown}: seeds must be non-negative integers (numpy and torch "
                         "refuse negative seeds); use e.g. 0 1 2 3 4")
    if len(set(vals)) != len(vals):
        raise ValueError(f"{where} {shown}: seeds must be distinct; give each seed once")
    if len(vals) < least:
        hint = ", or run one training with python -m trainables.train" if least > 1 else ""
        raise ValueError(f"{where} {shown}: needs at least {least} seed{'s' * (least > 1)} (a "
                         f"mean +- std and every test compare seeds); give {least} or more{hint}")
    return f"seeds {shown}: {len(vals)} distinct, non-negative"


def grid_spec(grid) -> dict[str, Any]:
    """What the report needs of a Grid, as JSON (stored on the parent run). Here, not beside
    the report: the report's statistics import scipy (1.5 s), which a table's driver does not
    need before its runs start."""
    return {
        "name": grid.name, "title": grid.title, "baseline": grid.baseline,
        "seeds": list(grid.seeds), "columns": list(grid.columns), "plot": grid.plot,
        "xlabel": grid.xlabel, "note": grid.note,
        "cells": [c.name for c in grid.cells],
        "x": {c.name: c.x for c in grid.cells if c.x is not None},
        "published": {c.name: dict(c.published) for c in grid.cells if c.published},
        "seed_offsets": {c.name: c.seed_offset for c in grid.cells if c.seed_offset},
        "transfer": bool(grid.transfer),
    }
