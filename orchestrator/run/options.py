"""The command line's campaign settings: where and how a table, search or calibration runs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    """The command line's campaign settings (``orchestrator.cli``)."""

    profile: str | None = None
    address: str | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None
    """None: 1 GPU per trial when the cluster has GPUs, else 0"""
    max_concurrent: int | None = None
    max_failures: int = 1
    tracking_uri: str | None = None
    storage: str = "runs"
    wait_for_workers: float = 900.0
    resume: bool = False
    array_size: int | None = None
    """members per array; None ('auto'): as few arrays as the devices allow"""
    keep_checkpoints: bool = False
