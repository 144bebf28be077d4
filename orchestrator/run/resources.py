"""What one trial holds, how many run at once, and waiting for an autoscaling cluster's workers.

Train V2 (Ray 2.60): a Tune trial is a light *driver* that launches a TorchTrainer; the trial
holds nothing that counts and the Train workers hold the real CPUs/GPUs. Tune cannot see the
workers' needs, so concurrency is set from the cluster: on a fixed cluster (the embedded local
Ray) as many trials as fit; on a cluster that autoscales, ``--max-concurrent`` trials, since a
Train run that does not fit yet waits for its placement group and that wait is what asks the
autoscaler for more workers.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

TRIAL_DRIVER_RESOURCES = {"CPU": 0, "memory": 1}
"""What each Tune trial's driver holds: nothing that counts. A driver that held CPU (even 0.01)
would let waiting drivers eat into the CPUs their own runs need: on a 1-CPU node that lost a
neighbour, two drivers plus a 1-CPU run no longer fit, and the table deadlocks. Tune refuses an
empty request, hence the one byte of memory."""


@dataclass(frozen=True)
class Resources:
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_concurrent: int | None = None

    def fits(self, cluster: Mapping[str, float]) -> int:
        """How many trials fit in ``cluster`` right now (0 when not even one)."""
        cpus, gpus = cluster.get("CPU", 0.0), cluster.get("GPU", 0.0)
        fit = math.floor((cpus + 1e-9) / self.cpus_per_trial)
        if self.gpus_per_trial > 0:
            fit = min(fit, math.floor((gpus + 1e-9) / self.gpus_per_trial))
        return fit

    def check_fits(self, cluster: Mapping[str, float], where: str) -> None:
        """One clear line when not even one trial fits ``cluster``."""
        cpus, gpus = cluster.get("CPU", 0.0), cluster.get("GPU", 0.0)
        if self.gpus_per_trial > gpus + 1e-9:
            raise ValueError(
                f"--gpus-per-trial {self.gpus_per_trial:g} but {where} has {gpus:g} GPUs; lower it, "
                "use 0 for CPU runs, or join a GPU cluster with --address"
            )
        if self.cpus_per_trial > cpus + 1e-9:
            raise ValueError(
                f"--cpus-per-trial {self.cpus_per_trial:g} but {where} has {cpus:g} CPUs; lower it"
            )

    def concurrency(self, cluster: Mapping[str, float], autoscaling: bool = False) -> int:
        """Trials at once: what fits (capped by --max-concurrent); on an autoscaling cluster
        --max-concurrent itself, the extra trials' runs waiting for the workers they bring."""
        fit = self.fits(cluster)
        if autoscaling and self.max_concurrent:
            return self.max_concurrent
        return max(1, min(fit, self.max_concurrent or fit))

    def bundle(self) -> dict[str, float]:
        return {"CPU": self.cpus_per_trial, **({"GPU": self.gpus_per_trial} if self.gpus_per_trial else {})}


def wait_for_resources(resources: Resources, timeout_s: float, poll_s: float = 5.0) -> None:
    """On a cluster, ask the autoscaler for the first trials' workers and wait until one fits.

    A fresh ``ray up`` cluster has a head with no CPU for trials and no GPU worker yet. The
    request is withdrawn as soon as a trial fits: from then on the queued runs' own placement
    groups are the demand, so no node is kept up (and billed) by a standing request.
    """
    import ray
    from ray.autoscaler.sdk import request_resources

    if resources.fits(ray.cluster_resources()) >= 1:
        return
    n = resources.max_concurrent or 1
    request_resources(bundles=[resources.bundle()] * n)
    print(f"waiting up to {timeout_s:.0f}s for workers to join ({n} x {resources.bundle()} "
          "requested; `ray status` shows them coming)...", flush=True)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if resources.fits(ray.cluster_resources()) >= 1:
                return
            time.sleep(poll_s)
        resources.check_fits(ray.cluster_resources(), f"the cluster after {timeout_s:.0f}s")
        raise ValueError(f"no trial fits the cluster after {timeout_s:.0f}s; check `ray status`")
    finally:
        request_resources(bundles=[])


def local_resources() -> dict[str, float]:
    """This machine, as the embedded Ray will see it."""
    import torch

    return {"CPU": float(os.cpu_count() or 1), "GPU": float(torch.cuda.device_count())}
