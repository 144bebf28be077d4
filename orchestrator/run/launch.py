"""What a Tune trial needs to run its array, in plain values: no torch until it trains.

A Tune trial that launches a Ray Train run (an array of several workers) only forwards its
reports. Given an :class:`~orchestrator.spec.plan.ArrayPlan` it would unpickle each member's
``RunConfig``, whose method settings live beside their losses, and so import torch (about 4 CPU
seconds) in a process that never computes. A :class:`Launch` carries the same array as the
configs' dicts, the plug-in methods' sources and the scaling the driver already resolved; the
process that trains (the trial itself for one worker, else the Train workers) rebuilds the
configs from the dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.spec.plan import ArrayPlan


@dataclass(frozen=True)
class Launch:
    """One array as the trial launches it (``trainables.train.run_torch_trainer``'s arguments)."""

    name: str
    """the Train run's name: stable per member set and parent, so ``--resume`` continues it"""
    members: tuple[tuple[str, Mapping[str, Any]], ...]
    """(member key, its RunConfig as a dict)"""
    storage: str
    cpus: float
    gpus: float
    max_failures: int
    keep_checkpoints: bool
    halving: tuple[tuple[int, ...], float] | None
    groups: Mapping[str, str] = field(default_factory=dict)
    methods: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    """plug-in method name -> (its module, its file): the workers load them first"""


def launch_of(plan: ArrayPlan) -> Launch:
    """The driver's plan as the trial's plain values."""
    from trainables.objectives.methods import sources

    return Launch(
        name=plan.name, members=tuple((m.key, m.run.to_dict()) for m in plan.members),
        storage=plan.storage, cpus=plan.cpus, gpus=plan.gpus, max_failures=plan.max_failures,
        keep_checkpoints=plan.keep_checkpoints, halving=plan.halving,
        groups={m.key: m.group for m in plan.members if m.group},
        methods=sources({m.run.objective.method for m in plan.members}),
    )
