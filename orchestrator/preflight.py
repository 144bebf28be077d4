"""What is checked before Ray starts and before any MLflow run exists: the data every member
trains on, opened once per distinct source (the demo corpus is generated here)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.plan import MemberPlan


@dataclass(frozen=True)
class DataCheck:
    array_keys: dict[str, str]
    """member key -> array key (who may share an array)"""
    total_steps: dict[str, int]
    """member key -> optimiser steps of its run"""


def check_data(members: Sequence[MemberPlan]) -> DataCheck:
    """Open every distinct data source once and check each member's features against its
    objective, before Ray starts."""
    from trainables.arrays.members import array_key
    from trainables.data import check_dims, load_data
    from trainables.schedule import count_steps

    opened, checked, keys, steps = {}, set(), {}, {}
    for m in members:
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
    return DataCheck(keys, steps)
