"""A real two-node Ray cluster on this machine, started with the ``ray start`` CLI on loopback:
the tiny table spreads over both nodes and ends with the numbers of a one-node run.

This is what README.md, "Running on a cluster", does on real machines (a head, a worker joining
it, the table run with ``--address``), minus SSH. Teardown kills exactly the processes this test started (they
carry a unique environment tag and a unique Ray temp dir), never ``ray stop``, which would stop
every Ray instance on the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.orchestrator.run import test_resilience as res
from tests.orchestrator.run.test_resilience import (
    ROOT,
    by_key,
    kill_tagged,
    log,
    numbers,
    read_table,
    tagged,
)

# The resilience module's fixtures, shared by name: the tiny profile and its one-node run.
space, reference, tables = res.space, res.reference, res.tables

pytestmark = pytest.mark.slow


def _by_cmdline(needle: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle.encode() in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                continue
    return out


@pytest.fixture(scope="module")
def two_nodes():
    """(address, env) of a head (1 CPU) and a second node (1 CPU, at 127.0.0.2)."""
    from orchestrator.results.browser_check import _free_port

    port = _free_port()
    # Short: Ray's unix socket paths live under it (108-byte limit).
    tmp = Path(tempfile.mkdtemp(prefix="mmray", dir="/tmp"))
    tag = os.urandom(8).hex()
    # The CLI and the cluster must agree on auth (docs/ecosystem-notes.md §2); RAY_TMPDIR keeps this
    # cluster's address file out of /tmp/ray, where another session's address="auto" looks.
    # PYTHONPATH: the nodes' workers import this checkout, not an editable install elsewhere.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": str(tmp), "PYTHONPATH": str(ROOT),
           "MMEMB_TEST_TAG": tag, "RAY_USAGE_STATS_ENABLED": "0"}
    ray_cli = [sys.executable, "-m", "ray.scripts.scripts", "start"]
    t0 = time.time()
    try:
        subprocess.run([*ray_cli, "--head", f"--port={port}", "--num-cpus=1",
                        "--include-dashboard=false", "--object-store-memory=100000000",
                        f"--temp-dir={tmp / 'ray'}"], env=env, check=True, timeout=180,
                       capture_output=True, text=True)
        head_s = time.time() - t0
        subprocess.run([*ray_cli, f"--address=127.0.0.1:{port}", "--num-cpus=1",
                        "--node-ip-address=127.0.0.2", "--object-store-memory=100000000"],
                       env=env, check=True, timeout=180, capture_output=True, text=True)
        log("ray start", head_s=round(head_s, 1), worker_s=round(time.time() - t0 - head_s, 1),
            processes=len(tagged(tag)))
        yield f"127.0.0.1:{port}", env
    except subprocess.CalledProcessError as e:
        pytest.fail(f"ray start failed: {e.stderr[-2000:]}")
    finally:
        n = kill_tagged(tag)
        for needle in (str(tmp), f"127.0.0.1:{port}"):  # anything that escaped the tag
            for pid in _by_cmdline(needle):
                os.kill(pid, 9)
        left = tagged(tag) + _by_cmdline(str(tmp))
        log("teardown", killed=n, left=left)


def test_table_spreads_over_two_nodes_with_one_node_numbers(space, reference, tables, two_nodes):
    address, env = two_nodes
    store = space / "two-nodes"
    t = tables(space, store, "run", "--address", address,
               env={k: env[k] for k in ("RAY_AUTH_MODE", "RAY_TMPDIR")})
    rc = t.wait()
    assert rc == 0, t.err
    _, _, kids = read_table(t.tracking)
    kids = by_key(kids)
    assert all(c.info.status == "FINISHED" for c in kids.values())
    nodes = {k: c.data.tags.get("mmemb.node") for k, c in kids.items()}
    assert all(nodes.values()) and len(set(nodes.values())) == 2, nodes
    for k, c in kids.items():
        assert numbers(c) == reference[k], k
    log("two-node table", seconds=round(t.seconds), nodes=nodes)


def test_embedded_ray_does_not_join_a_cluster_started_on_this_machine(two_nodes):
    """Without --address the table must start its own Ray, even when `ray start` left an
    address file (ray.init() with no address joins that cluster, and refuses num_cpus)."""
    address, env = two_nodes
    code = ("from trainables.runtime.ray_env import init_ray; init_ray(num_cpus=1, log_to_driver=False); "
            "import ray; print('gcs', ray.get_runtime_context().gcs_address)")
    tag = env["MMEMB_TEST_TAG"] + "-embedded"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(ROOT), "MMEMB_TEST_TAG": tag}, timeout=180)
    kill_tagged(tag)
    assert done.returncode == 0, done.stderr[-2000:]
    gcs = done.stdout.split("gcs ", 1)[1].strip()
    assert gcs.rsplit(":", 1)[1] != address.rsplit(":", 1)[1], (gcs, address)
