"""A driver killed with SIGKILL leaves its embedded Ray's agents running; the next start (or
``python -m orchestrator.ray_stop``) stops exactly those, in one line, and never the Ray of a
driver that still runs. Real embedded Rays, started by the project's own ``init_ray``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from orchestrator import ray_stop
from trainables.runtime import local_ray

ROOT = Path(__file__).resolve().parents[3]
DRIVER = """
import sys
from trainables.runtime.ray_env import init_ray
init_ray(num_cpus=1, log_to_driver=False)
print("up", flush=True)
sys.stdin.read()  # until the test closes it (or kills this driver)
"""
AGENTS = {"ray::DashboardAgent", "ray::RuntimeEnvAgent"}


def _start(env: dict) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    line = p.stdout.readline()
    assert line.strip() == "up", f"the driver did not start Ray (exit {p.poll()})"
    return p


def _ray_of(p: subprocess.Popen) -> dict[int, str]:
    """The driver's Ray processes, once its agents run (a condition, not a delay)."""
    psutil = local_ray._psutil()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        kids = {}
        for k in psutil.Process(p.pid).children(recursive=True):
            try:
                kids[k.pid] = k.name()
            except psutil.NoSuchProcess:
                continue
        if AGENTS.issubset(kids.values()):
            return kids
        time.sleep(0.1)
    raise AssertionError(f"Ray's agents did not start under the driver: {kids}")


def _gone(pid: int) -> bool:
    psutil = local_ray._psutil()

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def ray_tmp(monkeypatch):
    # a temp of the test's own: the drivers' folders land there, and no other command's do
    folder = tempfile.mkdtemp(prefix="mmray", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", folder)
    yield folder
    local_ray.stop(folder, grace_s=5)  # whatever a failed test left running there, then the folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_killed_drivers_ray_is_stopped_and_a_live_one_is_left_alone(ray_tmp, capsys):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_TMPDIR": ray_tmp}
    killed, live = _start(env), _start(env)
    theirs, ours = {}, {}
    try:
        theirs, ours = _ray_of(killed), _ray_of(live)
        root = local_ray.drivers_root()
        assert {f.name for f in root.iterdir()} == {str(killed.pid), str(live.pid)}
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=60)
        agents = [pid for pid, name in theirs.items() if name in AGENTS]
        assert not any(_gone(pid) for pid in agents)  # what SIGKILL leaves running

        assert [f.name for f, _ in local_ray.orphans()] == [str(killed.pid)]
        assert ray_stop.main([]) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == 1 and out[0].startswith("note: stopped "), out
        assert f"by driver process {killed.pid} " in out[0] and "ray::DashboardAgent" in out[0]
        assert all(_gone(pid) for pid in theirs), {p: n for p, n in theirs.items() if not _gone(p)}
        assert not (root / str(killed.pid)).exists()
        # the live driver's Ray runs on, untouched
        assert live.poll() is None and not any(_gone(pid) for pid in ours)
        assert ray_stop.main([]) == 0
        assert "no Ray left running by a killed driver" in capsys.readouterr().out

        live.stdin.close()  # a driver that ends normally leaves neither processes nor folder
        assert live.wait(timeout=120) == 0
        assert all(_gone(pid) for pid in ours), {p: n for p, n in ours.items() if not _gone(p)}
        assert not (root / str(live.pid)).exists()
    finally:
        for p in (killed, live):
            if p.poll() is None:
                p.kill()
                p.wait()
        for pid in [*theirs, *ours]:  # by their ids, whatever the test left
            if not _gone(pid):
                subprocess.run(["kill", "-9", str(pid)], check=False)


def test_a_folder_of_another_host_or_a_live_pid_is_not_an_orphan(ray_tmp):
    root = local_ray.drivers_root()
    root.mkdir(mode=0o700)
    (root / str(os.getppid())).mkdir()  # no record: its id's process (pytest's parent) lives
    other = root / "1234567"
    other.mkdir()
    (other / local_ray.MARKER).write_text('{"pid": 1234567, "host": "another-machine"}')
    dead = root / "7654321"
    dead.mkdir()
    (dead / local_ray.MARKER).write_text('{"pid": 7654321}')
    assert [f for f, _ in local_ray.orphans()] == [dead]
    assert local_ray.clean_orphans(say=print) == []  # nothing ran there: removed, not said
    assert sorted(f.name for f in root.iterdir()) == sorted([str(os.getppid()), "1234567"])
