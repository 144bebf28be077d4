from __future__ import annotations

import pickle
import time

import pytest


def test_copies_in_other_processes_write_in_one_order_without_gaps(local_ray):
    """The controller's copy and rank 0's copy both write; the reader sees every item once, in
    the order the puts were made, though each copy starts counting from 0."""
    import ray

    from orchestrator.run.report_channel import ReportChannel

    channel = ReportChannel("t")

    @ray.remote(num_cpus=0)
    def write(ch, items):
        for item in items:
            ch.put(item)

    ray.get(write.remote(channel, ["a1", "a2"]))
    ray.get(write.remote(channel, ["b1"]))  # a fresh copy: its count is behind the keys taken
    channel.put_nowait("c1")                # the reader's own copy, behind too
    ray.get(write.remote(channel, ["a3"]))
    assert [channel.get(timeout=1) for _ in range(5)] == ["a1", "a2", "b1", "c1", "a3"]
    channel.shutdown()


def test_an_empty_channel_waits_then_says_empty(local_ray):
    from orchestrator.run.report_channel import Empty, ReportChannel

    channel = ReportChannel()
    t0 = time.monotonic()
    with pytest.raises(Empty):
        channel.get(timeout=0.2)
    assert time.monotonic() - t0 >= 0.2
    with pytest.raises(Empty):
        channel.get(block=False)
    channel.put({"step": 3, "members": [{"key": "m", "stsb_dev": 71.5}]})
    assert channel.get(block=False) == {"step": 3, "members": [{"key": "m", "stsb_dev": 71.5}]}
    channel.shutdown()


def test_shutdown_leaves_nothing_in_the_store(local_ray):
    from orchestrator.run.report_channel import ReportChannel
    from trainables.runtime.ray_private import kv_get

    channel = ReportChannel("x")
    for i in range(3):
        channel.put(i)
    keys = [channel._key(i) for i in range(3)]
    assert [pickle.loads(kv_get(k)) for k in keys] == [0, 1, 2]
    channel.shutdown()
    assert [kv_get(k) for k in keys] == [None, None, None]


def test_two_channels_do_not_share_keys(local_ray):
    from orchestrator.run.report_channel import ReportChannel

    a, b = ReportChannel("same"), ReportChannel("same")
    a.put("for a")
    b.put("for b")
    assert (a.get(timeout=1), b.get(timeout=1)) == ("for a", "for b")
    a.shutdown()
    b.shutdown()
