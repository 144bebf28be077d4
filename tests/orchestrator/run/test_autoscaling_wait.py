"""Waiting for an autoscaling cluster's workers, on a real multi-node Ray on this machine.

A fresh ``ray up`` cluster is a head with CPU 0 and no GPU worker. ``wait_for_resources`` asks
the autoscaler for ``--max-concurrent`` trials' worth, returns as soon as one trial fits and then
withdraws the request (the queued runs' placement groups are the demand from there on, so no
node stays up, and billed, for a standing request); concurrency is ``--max-concurrent``. The
"autoscaler" here is a thread that adds a GPU node (a logical GPU) once it sees the request, read
back from where the v1 autoscaler reads it: no fixed delay anywhere.
"""

from __future__ import annotations

import json
import tempfile
import threading

import pytest

from orchestrator.run.resources import Resources, wait_for_resources
from tests.waiting import wait_for


def _request() -> list[dict] | None:
    """The standing autoscaler request (None: never made)."""
    from ray._private.ray_constants import AUTOSCALER_RESOURCE_REQUEST_CHANNEL
    from ray.experimental.internal_kv import _internal_kv_get

    raw = _internal_kv_get(AUTOSCALER_RESOURCE_REQUEST_CHANNEL)
    return None if raw is None else json.loads(raw)


@pytest.fixture
def fresh_cluster(monkeypatch):
    """A head with CPU 0, like cluster.yaml's; the test's driver connected to it."""
    import ray
    from ray.cluster_utils import Cluster

    # Cluster() writes its address where an address-less ray.init() of another test would join.
    monkeypatch.setenv("RAY_TMPDIR", tempfile.mkdtemp(prefix="mmray", dir="/tmp"))
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "object_store_memory": 80 * 2**20})
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def _in_thread(fn, *args, **kwargs) -> tuple[threading.Thread, dict]:
    """Run ``fn`` beside the test (the test's main thread must add nodes: Ray's node start
    installs signal handlers); ``box`` gets its result or error."""
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as e:  # handed to the test
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def _autoscale(cluster, waiting: threading.Thread) -> list[dict]:
    """What the autoscaler does: once a request stands, add a GPU worker. -> the request."""
    request = wait_for(lambda: _request() or not waiting.is_alive(), "the autoscaler request")
    assert waiting.is_alive(), "returned before any worker joined"
    cluster.add_node(num_cpus=2, num_gpus=1, object_store_memory=80 * 2**20)
    waiting.join()
    return request


def test_wait_returns_when_the_worker_joins_and_withdraws_the_request(fresh_cluster, capsys):
    import ray

    res = Resources(cpus_per_trial=1.0, gpus_per_trial=0.5, max_concurrent=4)
    assert res.fits(ray.cluster_resources()) == 0  # the head holds nothing for trials
    waiting, box = _in_thread(wait_for_resources, res, timeout_s=900, poll_s=0.05)
    request = _autoscale(fresh_cluster, waiting)
    assert "error" not in box, box
    assert request == [{"CPU": 1.0, "GPU": 0.5}] * 4  # --max-concurrent trials' worth
    assert res.fits(ray.cluster_resources()) == 2  # it returned because the worker is there
    assert _request() == []  # withdrawn: nothing keeps a node up but queued runs
    assert res.concurrency(ray.cluster_resources(), autoscaling=True) == 4
    assert "waiting up to 900s for workers" in capsys.readouterr().out


def test_no_worker_in_time_names_the_fix_and_withdraws(fresh_cluster):
    res = Resources(cpus_per_trial=1.0, gpus_per_trial=1.0, max_concurrent=2)
    with pytest.raises(ValueError, match="--gpus-per-trial 1 but the cluster after 0s has 0 GPUs"):
        wait_for_resources(res, timeout_s=0, poll_s=0.05)
    assert _request() == []


def test_a_session_waits_for_workers_before_its_parent_run(fresh_cluster, tmp_path):
    """Tables and searches both open a Session: neither fails at once on a fresh cluster."""
    from orchestrator.run.campaign import Campaign, Options, Session
    from orchestrator.tracking.client import Tracker

    opts = Options(address=fresh_cluster.address, gpus_per_trial=0.5, max_concurrent=3,
                   tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", storage=str(tmp_path / "runs"))
    waiting, box = _in_thread(Session, Campaign("search", "demo", "search demo", "plan0", (), {}),
                              opts, {})
    request = _autoscale(fresh_cluster, waiting)
    assert "error" not in box, box
    s = box["result"]
    assert len(request) == 3 and s.slots == 3 and _request() == []
    runs = Tracker(opts.tracking_uri).client.search_runs([s.tracker.experiment_id])
    assert [r.info.run_id for r in runs] == [s.parent]  # one parent, no failed first attempt
