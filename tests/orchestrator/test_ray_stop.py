"""orchestrator.ray_start / ray_stop: the cluster's stop finds exactly what its start commands
launched (recorded sessions), and leaves every other process alone: a colleague's Ray, a shell or
a `tail -f` that merely names the cluster's temp dir, a session that reuses a recorded number.
On the head it stops the workers over SSH too; the start commands' --this-node does not."""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from orchestrator import ray_start, ray_stop
from trainables.runtime import launched, local_ray

DAEMON = "nohup sleep 300 >/dev/null 2>&1 & nohup bash -c 'setsid sleep 301 & wait' >/dev/null 2>&1 & exit 0"
"""like `ray start`: leaves daemons running and exits; one starts a child in a session of its own
(as Ray starts a job's entrypoint), found as its descendant"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _bystanders(temp: Path) -> list[subprocess.Popen]:
    """A shell naming the temp dir with a child of its own session, and a `tail -F` of a log in it."""
    return [subprocess.Popen(["bash", "-c", f"setsid sleep 300 & wait; : {temp}/session_latest"],
                             start_new_session=True),
            subprocess.Popen(["tail", "-F", str(temp / "session_latest" / "logs" / "raylet.out")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)]


def _kill(procs) -> None:
    """Kill these and their children (the bystander shell's child has a session of its own)."""
    kids = []
    for p in procs:
        with contextlib.suppress(OSError):
            kids += [int(k) for k in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    for pid in kids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_stops_what_the_start_recorded_and_nothing_else(tmp_path, capsys):
    ours, theirs = tmp_path / "ray-mmemb-lab", tmp_path / "ray-mmemb-lab2"
    assert launched.launch_and_wait(["bash", "-c", DAEMON], ours, "ray") == 0
    assert launched.launch_and_wait(["bash", "-c", DAEMON], theirs, "ray") == 0  # a colleague's
    (rec,) = launched.records(ours)
    (other,) = launched.records(theirs)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (len(launched.members(rec)) < 3
                                           or len(launched.members(other)) < 3):
        time.sleep(0.05)
    started = [p.pid for p in launched.members(rec)]
    kept = [p.pid for p in launched.members(other)]
    assert len(started) == 3 and len(kept) == 3, (started, kept)
    bystanders = _bystanders(ours)
    try:
        assert ray_stop.main(["--temp-dir", str(ours), "--list"]) == 0
        listed = capsys.readouterr().out
        assert {int(ln.split()[0]) for ln in listed.splitlines()} == set(started)
        assert ray_stop.main(["--temp-dir", str(ours), "--grace", "5"]) == 0
        assert "stopped the cluster's 3 Ray process(es)" in capsys.readouterr().out
        assert all(_wait_gone(pid) for pid in started)
        assert all(_alive(pid) for pid in kept)  # the colleague's instance runs on
        assert all(p.poll() is None for p in bystanders)  # they only name the folder
        assert launched.records(ours) == []  # forgotten once stopped
        assert ray_stop.main(["--temp-dir", str(ours)]) == 0
        assert "nothing of the cluster of" in capsys.readouterr().out
    finally:
        launched.stop(launched.records(ours) + launched.records(theirs), 5)
        _kill(bystanders)


def test_a_session_number_reused_by_someone_else_is_not_ours(tmp_path):
    """A record outlives its session (a reboot, a crash); the number may then be someone else's."""
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        rec = launched.Launched("ray", stranger.pid, ("ray", "start"),
                                ((stranger.pid, time.time() - 3600),), host=socket.gethostname())
        (launched.folder(tmp_path)).mkdir(parents=True)
        (launched.folder(tmp_path) / f"ray-{stranger.pid}.json").write_text(rec.to_json())
        (found,) = launched.records(tmp_path)
        assert launched.members(found) == []
        assert ray_stop.main(["--temp-dir", str(tmp_path), "--grace", "1"]) == 0
        assert stranger.poll() is None
    finally:
        _kill([stranger])


def test_an_unrecorded_ray_is_found_by_its_programs_only(tmp_path, monkeypatch, capsys):
    """A Ray of the temp dir started by hand: Ray's own programs naming the folder (and their
    children) stop; a shell naming it does not."""
    ray_pkg = tmp_path / "site" / "ray"
    ray_pkg.mkdir(parents=True)
    (ray_pkg / "raylet.py").write_text("import subprocess, time\n"
                                       "subprocess.Popen(['sleep', '300'])\ntime.sleep(300)\n")
    monkeypatch.setattr(local_ray, "ray_dirs", lambda: (str(ray_pkg),))
    temp = tmp_path / "ray-mmemb-lab"
    raylet = subprocess.Popen([sys.executable, str(ray_pkg / "raylet.py"), f"--temp_dir={temp}/"])
    bystanders = _bystanders(temp)
    try:
        deadline = time.monotonic() + 30
        while len(local_ray.processes(temp)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = {p.pid for p in local_ray.processes(temp)}
        assert raylet.pid in found and len(found) == 2, found
        assert ray_stop.main(["--temp-dir", str(temp), "--grace", "5"]) == 0
        assert "2 Ray process(es) of the temp dir started outside" in capsys.readouterr().out
        assert raylet.wait(timeout=30) is not None
        assert all(p.poll() is None for p in bystanders)
    finally:
        _kill([raylet, *bystanders])


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVE = "import http.server, sys; http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()"


def test_a_service_is_ready_only_when_its_own_server_answers(tmp_path, capsys):
    port = _free_port()
    log = tmp_path / "server.log"
    argv = ["--service", "web", "--temp-dir", str(tmp_path), "--log", str(log),
            "--ready", f"http://127.0.0.1:{port}/", "--timeout", "60", "--",
            sys.executable, "-c", SERVE, str(port)]
    assert ray_start.main(argv) == 0
    (rec,) = launched.records(tmp_path)
    (server,) = launched.members(rec)
    assert rec.name == "web" and os.getsid(server.pid) == server.pid  # a session of its own
    assert ray_start.main(argv) == 0  # again: the first one is replaced, not doubled
    (again,) = launched.records(tmp_path)
    assert again.sid != rec.sid and _wait_gone(server.pid)
    assert ray_stop.main(["--temp-dir", str(tmp_path), "--grace", "5"]) == 0
    assert "1 web process(es)" in capsys.readouterr().out
    # someone else's server holds the port and answers: ours cannot bind it and is refused
    other = http.server.HTTPServer(("127.0.0.1", port), _Ok)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        assert ray_start.main(argv) == 1
        err = capsys.readouterr().err
        assert "error: web exited with status" in err and f"the end of {log}" in err
        assert launched.records(tmp_path) == []
    finally:
        other.shutdown()
        other.server_close()


def test_ray_start_needs_the_clusters_temp_dir(capsys):
    with pytest.raises(SystemExit) as e:
        ray_start.main(["ray", "start", "--head", "--port=26379"])
    assert e.value.code == 2
    assert "needs the cluster's own --temp-dir" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ray_start.main(["sleep", "1"])
    assert "expected a `ray start ...` command" in capsys.readouterr().err
    assert ray_start.temp_dir_of(["ray", "start", "--temp-dir", "/tmp/x"]) == "/tmp/x"
    assert ray_start.temp_dir_of(["ray", "start", "--temp-dir=/tmp/y"]) == "/tmp/y"


@pytest.fixture
def head(tmp_path, monkeypatch):
    """This machine as a `local` cluster's head: a recorded `ray start --head`, the bootstrap
    config `ray up` writes, and an `ssh` that logs what it was asked to run."""
    home, bin_ = tmp_path / "home", tmp_path / "bin"
    home.mkdir()
    bin_.mkdir()
    (home / "ray_bootstrap_config.yaml").write_text(yaml.safe_dump(
        {"cluster_name": "mmemb-lab", "auth": {"ssh_user": "mmemb"},
         "provider": {"type": "local", "head_ip": "10.0.0.10", "worker_ips": ["10.0.0.11", "10.0.0.12"]}}))
    log = tmp_path / "ssh.log"
    (bin_ / "ssh").write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n"
                              "echo \"stopped the cluster's 11 Ray process(es)\"\n")
    (bin_ / "ssh").chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    temp = tmp_path / "ray-mmemb-lab"
    daemon = subprocess.Popen(["bash", "-c", DAEMON], start_new_session=True)
    daemon.wait()
    assert launched.record(temp, "ray", daemon.pid, ["ray", "start", "--head"]).head
    yield temp, log, home
    launched.stop(launched.records(temp), 5)


def test_on_the_head_it_stops_every_worker_over_ssh(head, capsys):
    temp, log, home = head
    assert ray_stop.main(["--temp-dir", str(temp), "--grace", "5"]) == 0
    out = capsys.readouterr().out
    calls = log.read_text().splitlines()
    assert len(calls) == 2, calls
    for call, ip in zip(sorted(calls), ("10.0.0.11", "10.0.0.12"), strict=True):
        assert call.startswith(f"-i {home}/ray_bootstrap_key.pem -o BatchMode=yes"), call
        assert call.endswith(f" mmemb@{ip} . ~/.mmemb_env && python -m orchestrator.ray_stop "
                             f"--temp-dir {temp} --this-node"), call
        assert f"worker {ip}: stopped the cluster's 11 Ray process(es)" in out
    assert out.rstrip().endswith("other Ray instances and processes were left alone")
    assert launched.records(temp) == []


def test_this_node_only_leaves_the_workers_to_their_own_start(head, capsys):
    temp, log, _ = head
    assert ray_stop.main(["--temp-dir", str(temp), "--this-node", "--grace", "5"]) == 0
    assert not log.exists() and "stopped the cluster's" in capsys.readouterr().out
