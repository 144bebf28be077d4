"""What is checked before Ray starts and before any MLflow run exists: the data every member
trains on, opened once per distinct source (the demo corpus is generated here)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.plan import MemberPlan

DEMO_REPLACES = ("encoder", "data.text", "data.pairs", "data.senteval")
"""what the demo profile supplies itself: a cell that names its own refuses the demo"""


def check_demo_fit(grid, cells: Sequence[str] | None) -> None:
    """On the demo profile, refuse at once the cells that need data or an encoder of their own
    (wiki+coco, RoBERTa rows) instead of running them silently on the demo world."""
    own = [c.name for c in grid.cells if (cells is None or c.name in cells or c.name == grid.baseline)
           and any(k in {**grid.base, **c.overrides} for k in DEMO_REPLACES)]
    if own:
        keys = sorted({k for c in grid.cells if c.name in own
                       for k in {**grid.base, **c.overrides} if k in DEMO_REPLACES})
        which = "every cell" if len(own) == len(grid.cells) else f"cell(s) {own}"
        raise ValueError(
            f"grid {grid.name!r}: {which} need their own {', '.join(keys)} "
            f"({grid.note or 'see the grid file'}), which the demo profile replaces with its "
            "generated world; run them with --profile paper (or a YAML profile), or leave them "
            "out with --cells")


@dataclass(frozen=True)
class DataCheck:
    array_keys: dict[str, str]
    """member key -> array key (who may share an array)"""
    total_steps: dict[str, int]
    """member key -> optimiser steps of its run"""


def check_data(members: Sequence[MemberPlan]) -> DataCheck:
    """Open every distinct data source once and check each member's features against its
    objective, before Ray starts."""
    opened, checked, keys, steps = {}, set(), {}, {}
    failed: dict[str, list[str]] = {}  # message -> cells
    for m in members:
        try:
            _check_member(m, opened, checked, keys, steps)
        except (ValueError, FileNotFoundError, OSError) as e:
            cells = failed.setdefault(str(e), [])
            if m.cell not in cells:
                cells.append(m.cell)
    if failed:
        msg, cells = next(iter(failed.items()))
        ok = sorted({m.cell for m in members} - {c for cs in failed.values() for c in cs})
        hint = f"; the other cells run: --cells {' '.join(repr(c) for c in ok)}" if ok else ""
        raise ValueError(f"cell(s) {cells}: {msg}{hint}")
    return DataCheck(keys, steps)


def _check_member(m: MemberPlan, opened: dict, checked: set, keys: dict, steps: dict) -> None:
    from trainables.arrays.members import array_key
    from trainables.data import check_dims, load_data
    from trainables.schedule import count_steps

    cfg = m.run
    dkey = json.dumps([cfg.to_dict()["data"], cfg.objective.method == "simcse"], sort_keys=True)
    if dkey not in opened:
        opened[dkey] = load_data(cfg)
    data = opened[dkey]
    ckey = json.dumps([dkey, cfg.encoder, cfg.to_dict()["objective"]], sort_keys=True)
    if ckey not in checked:
        checked.add(ckey)
        check_dims(cfg, data)
    counts = count_steps(data.n_text, data.n_pair, cfg.batch_size, cfg.epochs, cfg.schedule)
    steps[m.key] = int(min(counts.total_steps, cfg.max_steps or math.inf))
    keys[m.key] = array_key(cfg, steps[m.key])
