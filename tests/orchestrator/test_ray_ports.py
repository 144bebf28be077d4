"""The cluster file's ports, refused in one line at its start command before Ray starts."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import ray_ports

ROOT = Path(__file__).resolve().parents[2]


def start(*flags: str) -> list[str]:
    return ["ray", "start", "--head", "--temp-dir=/tmp/ray-mmemb-test", *flags]


def test_a_gcs_port_of_99999_is_no_port():
    with pytest.raises(ValueError, match=r"`ray start --port=99999`: not a port \(1-65535\)"):
        ray_ports.check(start("--port=99999"))
    with pytest.raises(ValueError, match=r"--dashboard-port=http`: not a port"):
        ray_ports.check(start("--dashboard-port", "http"))


def test_two_services_on_one_port():
    with pytest.raises(ValueError, match=r"`ray start --port=26379 --dashboard-port=26379`: two "
                                         "services on one port"):
        ray_ports.check(start("--port=26379", "--dashboard-port=26379"), wait_s=0)


def test_a_port_inside_the_workers_range():
    with pytest.raises(ValueError, match=r"--ray-client-server-port=10500`: inside the range Ray "
                                         r"hands its workers \(10002-19999\)"):
        ray_ports.check(start("--ray-client-server-port=10500"), wait_s=0)
    ray_ports.check(start("--ray-client-server-port=10500", "--min-worker-port=11000"), wait_s=0)


def test_a_port_another_program_holds():
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        with pytest.raises(ValueError, match=rf"another program on this machine holds port {port} "
                                             rf"\(`ss -ltnp 'sport = :{port}'`"):
            ray_ports.check(start(f"--dashboard-agent-listen-port={port}"), wait_s=0)


def test_the_cluster_files_own_ports_pass():
    import re

    import yaml

    for name in ("cluster.local.yaml", "cluster.yaml"):
        cfg = yaml.safe_load((ROOT / name).read_text())
        for cmd in cfg["head_start_ray_commands"] + cfg["worker_start_ray_commands"]:
            if "ray start" in cmd:
                argv = re.sub(r"\$\{[^}]*\}|\$\S+", "x", cmd[cmd.index("ray start"):]).split()
                assert ray_ports.flags(argv), cmd
                assert all(1 <= p <= 65535 for _, p in ray_ports.check(argv, wait_s=0) or [])


def test_the_start_command_refuses_in_one_line_before_ray_starts(tmp_path):
    done = subprocess.run([sys.executable, "-m", "orchestrator.ray_start", "ray", "start", "--head",
                           f"--temp-dir={tmp_path}", "--port=99999"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: `ray start --port=99999`: not a port (1-65535); fix it in the cluster file's start "
        "command"]
    assert not (tmp_path / "mmemb-launched").exists()  # nothing recorded, nothing started


def test_a_failed_ray_start_is_tried_again(tmp_path):
    """A loaded worker missed Ray's 30 s for its raylet to register, and Ray's autoscaler never
    sets a node up again after one failure: the worker never joined."""
    import os

    fake = tmp_path / "bin"
    fake.mkdir()
    count = tmp_path / "starts"
    (fake / "ray").write_text(f'#!/bin/sh\necho x >> {count}\n[ "$(wc -l < {count})" -ge 2 ]\n')
    (fake / "ray").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "orchestrator.ray_start", "ray", "start",
                           f"--temp-dir={tmp_path / 'ray'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "note: `ray start` exited 1; starting it again (attempt 2 of 3)" in done.stderr
    assert count.read_text().count("x") == 2
    count.unlink()
    (fake / "ray").write_text("#!/bin/sh\nexit 3\n")
    done = subprocess.run([sys.executable, "-m", "orchestrator.ray_start", "--attempts", "2", "ray",
                           "start", f"--temp-dir={tmp_path / 'ray'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and done.stderr.count("starting it again") == 1, done.stderr
