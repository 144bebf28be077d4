"""The embedded Ray started in a helper thread: it outlives the start (Ray's daemons die with the
thread that forked them unless that thread lives on), and one never claimed is stopped."""

from __future__ import annotations

import time

from orchestrator.run.early_ray import EarlyRay
from orchestrator.run.options import Options


def test_only_a_fresh_run_on_the_embedded_ray_starts_early():
    for opts in (Options(address="auto"), Options(resume=True), Options(queue=True)):
        assert EarlyRay.beside(opts) is None


def test_the_ray_started_aside_keeps_its_daemons_then_a_refusal_stops_it():
    import ray

    if ray.is_initialized():
        ray.shutdown()
    early = EarlyRay()
    early.claim()
    assert early.error is None and ray.is_initialized()
    time.sleep(2)  # long enough for a parent-death signal to have killed the GCS

    @ray.remote(num_cpus=0)
    def answer() -> int:
        return 42

    assert ray.get(answer.remote(), timeout=60) == 42
    assert early.thread.is_alive()  # the thread that forked the daemons lives on
    early.claimed = False  # as if the driver had refused before claiming it
    early.stop_unclaimed()
    assert not ray.is_initialized()
    early.stop_unclaimed()  # once only
