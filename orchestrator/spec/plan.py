"""The typed plan of a campaign: members (one run each) packed into trials (one array each).

A :class:`RunPlan` is one (cell, seed) of a table or one (configuration, seed) of a search:
one MLflow child run, with a ``RunConfig`` whose objective is already resolved, so its hash, its
MLflow params and the run itself all see the same numbers. A :class:`ArrayPlan` is one Ray Tune
trial: an array of members that train together (``trainables.arrays``), in the trial's process,
or in one Ray Train run over several workers.
Plans are frozen and built once; nothing patches them afterwards.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from orchestrator.spec.grids import Grid, expand, frozen_mapping, path_part
from trainables.config.run_config import RunConfig


@dataclass(frozen=True)
class RunPlan:
    """One run: one MLflow child, one member of an array."""

    key: str
    """stable id inside its campaign ('kdmcse/seed-3'); resume skips keys already finished"""
    cell: str
    """the table row (or search configuration) it belongs to"""
    seed: int
    run: RunConfig
    """the full, resolved run config"""
    label: str
    """how the live view names it ('KDMCSE seed 3')"""
    run_name: str
    """the MLflow child run's name ('KDMCSE | seed 3')"""
    group: str = ""
    """members of one group are judged together (a search configuration's seeds); '' = none"""
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)
    """setting -> the layer that set it, for every setting that differs from its field default
    (``trainables.config.profiles.explain_config``; ``--dry-run --explain`` prints it)"""
    cell_label: str = field(default="", compare=False)
    """the cell's short label in the MLflow runs view, which groups by it: its row number in the
    table first ('2. SoftGround tau_t=0.2'), so two long names cut short stay apart; '' = the
    cell's name"""

    @property
    def config_hash(self) -> str:
        return self.run.config_hash()


@dataclass(frozen=True)
class ArrayPlan:
    """One Tune trial = one array of members trained together (in the trial, or a Train run)."""

    campaign: str
    """the grid or search it belongs to (names its Train runs and tags its MLflow runs)"""
    members: tuple[RunPlan, ...]
    storage: str
    """Ray storage for checkpoints: a folder shared by all nodes, or a URI"""
    cpus: float
    """CPUs per Train worker"""
    gpus: float
    """GPUs per Train worker (fractions pack arrays on one GPU)"""
    max_failures: int = 1
    keep_checkpoints: bool = False
    halving: tuple[tuple[int, ...], float] | None = None
    """search only: (rung steps, eta) of the successive halving of member groups in the array"""
    parent: str = ""
    """the MLflow parent run (the table or search) these trainings belong to: part of the Train
    run's name, so a plain rerun (a new parent) never restores another table's checkpoints,
    while ``--resume`` (which reopens the parent) continues its own"""
    note: str = ""
    """why the array trains slower than a stacked one ('' when its encoder stacks): the looped
    fallback's line (``trainables.arrays.looped``), set by ``orchestrator.run.campaign.noted``"""

    @property
    def name(self) -> str:
        """Stable per member set and parent run: a resumed array finds its Train run's
        checkpoints; the same members under another parent are another Train run."""
        runs = sorted((m.key, m.config_hash) for m in self.members)
        blob = json.dumps([runs, self.parent] if self.parent else runs)
        return f"{path_part(self.campaign)}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"

    @property
    def label(self) -> str:
        """What the dry run and the run's progress lines call it: its members only (not the
        parent run, which a dry run does not have), so both name the same array alike."""
        if len(self.members) == 1:
            return self.members[0].label
        return f"array {replace(self, parent='').name[-6:]} ({len(self.members)} members)"

    def without(self, keys: Iterable[str]) -> ArrayPlan | None:
        """This trial minus finished members (None when nothing is left to run)."""
        drop = set(keys)
        left = tuple(m for m in self.members if m.key not in drop)
        if not left:
            return None
        return self if len(left) == len(self.members) else replace(self, members=left)


def plan_runs(grid: Grid, profile: str | None, seeds: Sequence[int] | None = None,
              cells: Sequence[str] | None = None, seeds_from: str = "grid seeds") -> list[RunPlan]:
    """Every (cell, seed) of ``grid`` as a run, baseline first, configs built on ``profile``.

    ``cells`` runs a subset (the baseline is always kept: the report compares against it). A grid
    that reports TR adds its transfer settings below the grid's own (``transfer_layer``).
    ``seeds_from`` names where the seeds came from (``--seeds``) in each run's origins.
    """
    from trainables.config.profiles import explain_config, transfer_layer

    transfer = transfer_layer(profile)[0] if grid.transfer else {}
    if cells is not None:
        unknown = [c for c in cells if c not in [x.name for x in grid.cells]]
        if unknown:
            raise ValueError(f"--cells {unknown} not in grid {grid.name!r}; its cells: "
                             f"{[c.name for c in grid.cells]}")
    out = []
    for t in expand(grid, seeds):
        if cells is not None and t.cell not in cells and t.cell != grid.baseline:
            continue
        cell = grid.cell(t.cell)
        layers = [(f"grid {grid.name} reports TR", transfer), (f"grid {grid.name} base", grid.base),
                  (f"cell {t.cell}", cell.overrides), (seeds_from, {"seed": t.overrides["seed"]})]
        try:
            cfg, origins = explain_config(profile, layers)
        except (ValueError, FileNotFoundError) as e:
            raise ValueError(f"grid {grid.name}, cell {t.cell!r}: {e}") from None
        row = [c.name for c in grid.cells].index(t.cell) + 1
        out.append(RunPlan(t.key, t.cell, t.seed, cfg, f"{t.cell} seed {t.seed}",
                           f"{t.cell} | seed {t.seed}", origins=frozen_mapping(origins),
                           cell_label=f"{row}. {t.cell}"))
    return out


def plan_id(kind: str, name: str, members: Sequence[RunPlan], *extra: object) -> str:
    """Names a campaign: the same members (keys and configs) give the same id, so --resume finds
    its parent run whatever the packing."""
    blob = json.dumps([kind, name, [(m.key, m.config_hash) for m in members], *extra], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


AUTO_MAX_MEMBERS = 64
"""the most members 'auto' puts in one array: a thousand seeds on one device would make one array
of a thousand stacked students (memory no check here foresees); more arrays queue instead"""


def pack(members: Sequence[RunPlan], array_keys: dict[str, str], campaign: str, storage: str,
         cpus: float, gpus: float, max_failures: int, array_size: int | None, slots: int,
         keep_checkpoints: bool = False,
         halving: tuple[tuple[int, ...], float] | None = None) -> list[ArrayPlan]:
    """Pack members into arrays of compatible members (``array_keys``: member key -> array key).

    ``array_size`` caps the members per array (1: one run per trial, as before arrays); None
    ('auto') makes as few arrays as the devices allow: about ``slots`` arrays (the trials that fit
    at once), split over the groups of compatible members in proportion to their size. Members of
    one ``group`` (a search configuration's seeds) always share an array, so they are judged on
    the same steps. The packing is deterministic, so a resumed campaign rebuilds the same arrays.
    """
    if array_size is not None and array_size < 1:
        raise ValueError(f"--array-size {array_size} must be >= 1 or 'auto'")
    compat: dict[str, list[list[RunPlan]]] = {}
    for unit in _units(members):
        compat.setdefault(array_keys[unit[0].key], []).append(unit)
    total = len(members)
    out: list[ArrayPlan] = []
    for units in compat.values():
        n = sum(len(u) for u in units)
        if array_size is None:
            arrays = max(1, min(len(units), round(max(1, slots) * n / total)))
            cap = min(math.ceil(n / arrays), AUTO_MAX_MEMBERS)
        else:
            cap = array_size
        for chunk in _chunks(units, cap):
            out.append(ArrayPlan(campaign, tuple(chunk), storage, cpus, gpus, max_failures,
                                 keep_checkpoints, halving))
    return out


def _units(members: Sequence[RunPlan]) -> list[list[RunPlan]]:
    """Members that must stay together (one group), in plan order; others alone."""
    units: list[list[RunPlan]] = []
    where: dict[str, list[RunPlan]] = {}
    for m in members:
        if m.group and m.group in where:
            where[m.group].append(m)
            continue
        unit = [m]
        units.append(unit)
        if m.group:
            where[m.group] = unit
    return units


def _chunks(units: list[list[RunPlan]], cap: int) -> list[list[RunPlan]]:
    """Consecutive units into arrays of at most ``cap`` members (a unit is never split; a unit
    larger than ``cap`` is an array of its own), as evenly as ``cap`` allows."""
    n = sum(len(u) for u in units)
    k = max(1, math.ceil(n / cap))
    target = n / k
    out: list[list[RunPlan]] = [[]]
    for u in units:
        cur = out[-1]
        if cur and (len(cur) + len(u) > cap or len(cur) >= target - 1e-9):
            out.append([])
        out[-1].extend(u)
    return [c for c in out if c]


def profile_tags(profile_arg: str | None) -> dict[str, str]:
    """The parent run's tags naming the profile that ran, not what ``--profile`` said (none means
    ``$MMEMB_PROFILE``, ``./mmemb.yaml`` or the demo): ``mmemb.profile`` its name, and for a
    profile file ``mmemb.profile_file`` where it is."""
    import os
    from pathlib import Path

    from trainables.config.profiles import profile_overrides

    chosen = profile_arg or os.environ.get("MMEMB_PROFILE") or (
        "mmemb.yaml" if Path("mmemb.yaml").is_file() else "demo")
    name, _ = profile_overrides(chosen)
    tags = {"mmemb.profile": name}
    if chosen not in ("demo", "paper"):
        tags["mmemb.profile_file"] = str(Path(chosen).expanduser().resolve())
    return tags


def plan_summary(members: Sequence[RunPlan], profile: str, profile_arg: str | None,
                 **settings: object) -> dict:
    """What a campaign's plan is made of, as JSON: stored on its parent run so that a later
    ``--resume`` whose plan differs can say how (:func:`plan_difference`). ``profile`` is the
    profile's name, ``profile_arg`` what ``--profile`` said."""
    return {"profile": profile, "profile_arg": profile_arg, "cells": list(dict.fromkeys(m.cell for m in members)),
            "seeds": sorted({m.seed for m in members}), "settings": dict(settings),
            "runs": {m.key: m.config_hash for m in members}}


def plan_union(old: Mapping, new: Mapping) -> list[str]:
    """The options of the plan holding both ``old`` (an interrupted campaign's) and ``new`` when
    they differ only in cells or seeds: ``--resume`` with them extends the old parent, reusing its
    finished runs. [] when another difference (profile, settings, hashes) forbids it."""
    if old.get("profile") != new.get("profile") or \
            (old.get("settings") or {}) != (new.get("settings") or {}):
        return []
    old_runs, new_runs = dict(old.get("runs") or {}), dict(new.get("runs") or {})
    if any(old_runs[k] != new_runs[k] for k in old_runs.keys() & new_runs.keys()):
        return []
    out = []
    old_cells, new_cells = list(old.get("cells") or []), list(new.get("cells") or [])
    if old_cells and set(old_cells) != set(new_cells):
        cells = old_cells + [c for c in new_cells if c not in old_cells]
        out.append("--cells " + " ".join(repr(c) if " " in c else c for c in cells))
    old_seeds, new_seeds = list(old.get("seeds") or []), list(new.get("seeds") or [])
    if old_seeds and set(old_seeds) != set(new_seeds):
        out.append(f"--seeds {' '.join(map(str, sorted(set(old_seeds) | set(new_seeds))))}")
    return out


def plan_difference(old: Mapping, new: Mapping) -> tuple[list[str], list[str]]:
    """How the plan ``old`` (an interrupted campaign's) differs from ``new`` (this command's):
    (what differs, one phrase each; the options that would ask for ``old`` again)."""
    what: list[str] = []
    fix: list[str] = []
    if old.get("profile") and old["profile"] != new.get("profile"):
        what.append(f"profile {old['profile']} there, {new.get('profile')} here")
        fix.append(f"--profile {old.get('profile_arg') or old['profile']}")
    old_cells, new_cells = list(old.get("cells") or []), list(new.get("cells") or [])
    if old_cells and set(old_cells) != set(new_cells):
        gone = [c for c in old_cells if c not in new_cells]
        added = [c for c in new_cells if c not in old_cells]
        what.append("cells " + "; ".join(
            ([f"{gone} only there"] if gone else []) + ([f"{added} only here"] if added else [])))
        fix.append("--cells " + " ".join(repr(c) if " " in c else c for c in old_cells))
    old_seeds, new_seeds = list(old.get("seeds") or []), list(new.get("seeds") or [])
    if old_seeds and old_seeds != new_seeds:
        what.append(f"seeds {' '.join(map(str, old_seeds))} there, "
                    f"{' '.join(map(str, new_seeds))} here")
        fix.append(f"--seeds {' '.join(map(str, old_seeds))}")
    for k, v in (old.get("settings") or {}).items():
        if (new.get("settings") or {}).get(k) != v:
            what.append(f"{k} {v} there, {(new.get('settings') or {}).get(k)} here")
    old_runs, new_runs = dict(old.get("runs") or {}), dict(new.get("runs") or {})
    common = [k for k in new_runs if k in old_runs]
    changed = [k for k in common if old_runs[k] != new_runs[k]]
    if common and len(changed) == len(common):
        what.append("every run's config hash differs: the settings changed (the profile's "
                    "contents, the grid's cells, or a newer mmemb)")
    elif changed:
        what.append(f"{len(changed)} of {len(common)} runs' settings differ (e.g. {changed[0]})")
    return what, fix
