"""bench/process_cpu.py: the CPU seconds of a command's process tree, by kind of process, read
from /proc on a real process tree (a parent and the child it starts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.waiting import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
process_cpu = pytest.importorskip("process_cpu", reason="needs bench/ on the path")

# the child burns CPU, then waits on its stdin (which it inherits) until the test closes it
CHILD = "sum(range(20_000_000)); import sys; sys.stdin.read()"
PARENT = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {CHILD!r}])"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux /proc")
def test_a_child_is_followed_and_counted_by_kind():
    proc = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE)
    cpu = process_cpu.ProcessCpu(proc.pid, interval_s=0.05).start()
    try:
        def child_seen():
            kids = [p for pid, p in cpu.procs.items() if pid != proc.pid and CHILD[:20] in p.title]
            return kids and kids[0].cpu_s >= 0.2

        wait_for(child_seen, "the child's CPU seconds")
    finally:
        proc.stdin.close()
        proc.wait()
        cpu.stop()
    kinds = cpu.by_kind()
    assert set(kinds) == {"driver", "other"}, kinds
    assert kinds["driver"][0] == 1 and kinds["other"][0] == 1
    assert kinds["other"][1] >= 0.2


@pytest.mark.parametrize(("title", "kind"), [
    ("ray::ImplicitFunc.train", "Tune trial actors"),
    ("ray::TrainController.run", "Train controllers"),
    ("ray::RayTrainWorker._RayTrainWorker__execute", "Train workers"),
    ("ray::_QueueActor.get", "report queues"),
    ("/x/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/s", "Ray daemons"),
    ("/x/python /x/ray/_private/workers/default_worker.py --node-ip-address=1", "idle Ray workers"),
    ("python -m pytest", "other"),
])
def test_kinds_from_titles(title, kind):
    assert process_cpu.kind_of(title, is_root=False) == kind
    assert process_cpu.kind_of(title, is_root=True) == "driver"
