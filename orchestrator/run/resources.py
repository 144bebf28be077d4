"""What one trial holds, how many run at once, and waiting for an autoscaling cluster's workers.

An array of one worker trains in its Tune trial, which holds that worker's CPUs/GPUs. An array
of several is a Ray Train run (Train V2, Ray 2.60) that its trial launches: the trial is then a
light *driver* holding nothing that counts, and the Train workers hold the real CPUs/GPUs
(``orchestrator.run.trial.trial_resources``). Tune does not see the workers' needs, so
concurrency is set from the cluster either way: on a fixed cluster (the embedded local Ray) as
many arrays as fit; on a cluster that autoscales, ``--max-concurrent``, since an array that does
not fit yet waits for its placement group (the trial's, or its Train run's) and that wait is
what asks the autoscaler for more workers.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TRIAL_DRIVER_RESOURCES = {"CPU": 0, "memory": 1}
"""What a Tune trial that launches a Train run (several workers) holds: nothing that counts. A
driver that held CPU (even 0.01) would let waiting drivers eat into the CPUs their own runs
need: on a 1-CPU node that lost a neighbour, two drivers plus a 1-CPU run no longer fit, and the table deadlocks. Tune refuses an
empty request, hence the one byte of memory."""


Node = Mapping[str, float]
"""one node's resources ({"CPU": 8, "GPU": 1})"""


def _nodes(cluster: Node | Sequence[Node]) -> list[Node]:
    """A cluster as its nodes; one mapping is one node (this machine, or a total)."""
    return [cluster] if isinstance(cluster, Mapping) else list(cluster)


@dataclass(frozen=True)
class Resources:
    """What one array (one Tune trial) holds: ``workers`` Ray Train workers, each with
    ``cpus_per_trial`` CPUs and ``gpus_per_trial`` GPUs on one node (Ray places each worker's
    bundle on a single node; the workers of one array may spread over nodes)."""

    cpus_per_trial: float = 1.0
    """CPUs per Train worker (--cpus-per-trial)"""
    gpus_per_trial: float = 0.0
    """GPUs per Train worker (--gpus-per-trial)"""
    max_concurrent: int | None = None
    workers: int = 1
    """Train workers per array (the runs' ``num_workers``)"""

    def _per_node(self, node: Node) -> int:
        fit = math.floor((node.get("CPU", 0.0) + 1e-9) / self.cpus_per_trial)
        if self.gpus_per_trial > 0:
            fit = min(fit, math.floor((node.get("GPU", 0.0) + 1e-9) / self.gpus_per_trial))
        return max(fit, 0)

    def fits(self, cluster: Node | Sequence[Node]) -> int:
        """How many arrays fit right now (0 when not even one): worker bundles placed node by
        node, ``workers`` of them per array."""
        return sum(self._per_node(n) for n in _nodes(cluster)) // max(self.workers, 1)

    def check_fits(self, cluster: Node | Sequence[Node], where: str, who: str = "") -> None:
        """One clear line when not even one array fits ``cluster``. ``who`` names the runs
        whose ``num_workers`` set ``workers`` (e.g. "cell 'KDMCSE': ")."""
        nodes = _nodes(cluster)
        gpus = max((n.get("GPU", 0.0) for n in nodes), default=0.0)
        cpus = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
        per_node = "" if len(nodes) == 1 else " on its largest node"
        if self.gpus_per_trial > gpus + 1e-9:
            raise ValueError(
                f"--gpus-per-trial {self.gpus_per_trial:g} but {where} has {gpus:g} GPUs{per_node}; "
                "lower it, use 0 for CPU runs, or join a GPU cluster with --address"
            )
        if self.cpus_per_trial > cpus + 1e-9:
            raise ValueError(
                f"--cpus-per-trial {self.cpus_per_trial:g} but {where} has {cpus:g} CPUs{per_node}; "
                "lower it"
            )
        if self.fits(nodes) < 1:
            w = self.workers
            need = f"{w * self.cpus_per_trial:g} CPUs" + (
                f" and {w * self.gpus_per_trial:g} GPUs" if self.gpus_per_trial else "")
            have = f"{sum(n.get('CPU', 0.0) for n in nodes):g} CPUs" + (
                f" and {sum(n.get('GPU', 0.0) for n in nodes):g} GPUs" if self.gpus_per_trial else "")
            room = sum(self._per_node(n) for n in nodes)
            raise ValueError(
                f"{who}num_workers={w} Train workers x (--cpus-per-trial {self.cpus_per_trial:g}"
                + (f", --gpus-per-trial {self.gpus_per_trial:g}" if self.gpus_per_trial else "")
                + f") need {need} per array but {where} has {have}, room for {room} worker(s); "
                f"set num_workers={max(room, 1)} or less in the profile or cell, or lower "
                "--cpus-per-trial")

    def concurrency(self, cluster: Node | Sequence[Node], autoscaling: bool = False) -> int:
        """Arrays at once: what fits (capped by --max-concurrent); on an autoscaling cluster
        --max-concurrent itself, the extra arrays' runs waiting for the workers they bring."""
        fit = self.fits(cluster)
        if autoscaling and self.max_concurrent:
            return self.max_concurrent
        return max(1, min(fit, self.max_concurrent or fit))

    def bundle(self) -> dict[str, float]:
        """One Train worker's bundle."""
        return {"CPU": self.cpus_per_trial, **({"GPU": self.gpus_per_trial} if self.gpus_per_trial else {})}


def cluster_nodes() -> list[dict[str, float]]:
    """The joined (or embedded) Ray cluster's live nodes, each its total CPU and GPU."""
    import ray

    return [{"CPU": float(n["Resources"].get("CPU", 0.0)), "GPU": float(n["Resources"].get("GPU", 0.0))}
            for n in ray.nodes() if n.get("Alive")]


def wait_for_resources(resources: Resources, timeout_s: float, poll_s: float = 5.0) -> None:
    """On a cluster, ask the autoscaler for the first trials' workers and wait until one fits.

    A fresh ``ray up`` cluster has a head with no CPU for trials and no GPU worker yet. The
    request is withdrawn as soon as a trial fits: from then on the queued runs' own placement
    groups are the demand, so no node is kept up (and billed) by a standing request.
    """
    from ray.autoscaler.sdk import request_resources

    if resources.fits(cluster_nodes()) >= 1:
        return
    n = (resources.max_concurrent or 1) * resources.workers
    request_resources(bundles=[resources.bundle()] * n)
    print(f"waiting up to {timeout_s:.0f}s for workers to join ({n} x {resources.bundle()} "
          "requested; `ray status` shows them coming)...", flush=True)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if resources.fits(cluster_nodes()) >= 1:
                return
            time.sleep(poll_s)
        resources.check_fits(cluster_nodes(), f"the cluster after {timeout_s:.0f}s")
        raise ValueError(f"no trial fits the cluster after {timeout_s:.0f}s; check `ray status`")
    finally:
        request_resources(bundles=[])


def local_resources() -> dict[str, float]:
    """This machine, as the embedded Ray will see it."""
    import torch

    return {"CPU": float(os.cpu_count() or 1), "GPU": float(torch.cuda.device_count())}
