"""The command line's campaign settings: where and how a table, search or calibration runs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    """The command line's campaign settings (``orchestrator.cli``)."""

    profile: str | None = None
    address: str | None = None
    cpus_per_trial: float = 1.0
    """CPUs per Train worker (an array runs ``num_workers`` workers)"""
    gpus_per_trial: float | None = None
    """GPUs per Train worker; None: 1 when the cluster has GPUs, else 0"""
    max_concurrent: int | None = None
    max_failures: int = 1
    tracking_uri: str | None = None
    artifact_location: str | None = None
    """where a new experiment keeps its artifacts (a database store: MLflow's default is
    ./mlruns on the machine that created it)"""
    storage: str = "runs"
    wait_for_workers: float = 900.0
    resume: bool = False
    array_size: int | None = None
    """members per array; None ('auto'): as few arrays as the devices allow"""
    keep_checkpoints: bool = False
    queue: bool = False
    """wait for another driver of the same plan and store instead of refusing"""
