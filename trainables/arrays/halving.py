"""Successive halving inside a search array: at each rung, the better configurations go on.

A search's array may hold several configurations, each with its seeds (a group). At a rung step
(``rungs``) each group's mean STS-B dev score ranks it, the best ``1/eta`` of the groups keep
training and the members of the others leave the array, recorded as pruned at that step: a
configuration is judged on all its seeds, never on one lucky seed. Only rank 0 has dev scores:
it decides, and every other worker drops what it says, so that the workers' stacked parameters
keep one shape (a worker that kept more members would fail the next gradient all-reduce).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainables.arrays.members import Member


@dataclass(frozen=True)
class Halving:
    """The halving schedule of one array: none when ``rungs`` is empty (a table's arrays)."""

    rungs: tuple[int, ...] = ()
    eta: float = 2.0
    groups: Mapping[str, str] = field(default_factory=dict)
    """member key -> its group (a configuration's seeds); a member of no group is its own"""

    @classmethod
    def of(cls, halving: tuple[Sequence[int], float] | None, groups: Mapping[str, str] | None,
           keys: Sequence[str]) -> Halving:
        """From the trial's ``halving`` (rung steps, eta) and ``groups`` (member key -> group)."""
        rungs, eta = (tuple(int(r) for r in halving[0]), float(halving[1])) if halving else ((), 2.0)
        return cls(rungs, eta, {k: (groups or {}).get(k, k) for k in keys})

    def groups_to_keep(self, alive: Sequence[Member], scores: Mapping[str, float], rank: int,
                       world: int) -> set[str]:
        """The groups that go on: the best ``1/eta`` by their members' mean dev score, decided on
        rank 0 and broadcast to every other worker."""
        keep: set[str] | None = None
        if rank == 0:
            by_group: dict[str, list[float]] = {}
            for m in alive:
                by_group.setdefault(self.groups[m.key], []).append(scores[m.key])
            ranked = sorted(by_group, key=lambda g: -sum(by_group[g]) / len(by_group[g]))
            keep = set(ranked[: max(1, math.ceil(len(ranked) / self.eta))])
        if world > 1:
            import torch.distributed as dist

            box = [keep]
            dist.broadcast_object_list(box, src=0)
            keep = box[0]
        assert keep is not None
        return keep

    def prune(self, alive: Sequence[Member], keep: set[str],
              step: int) -> tuple[list[int], list[dict[str, Any]]]:
        """Mark the members of the groups not kept as pruned at ``step``: the indices (among
        ``alive``) of the members that stay, and one report entry per member pruned."""
        out, kept = [], []
        for j, m in enumerate(alive):
            if self.groups[m.key] in keep:
                kept.append(j)
            else:
                m.record.pruned_at = step
                out.append({"key": m.key, "pruned": 1, "step": step})
        return kept, out
