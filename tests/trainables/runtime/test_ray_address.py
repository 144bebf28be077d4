"""An --address nobody answers: one line naming it and `ray status --address`, within seconds."""

from __future__ import annotations

import socket
import time

import pytest

from trainables.runtime import ray_address


def dead_port() -> int:
    """A port nothing listens on (bound, then closed: the kernel will not hand it out at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nothing_listening_is_one_line_naming_the_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    port = dead_port()
    t = time.monotonic()
    with pytest.raises(ConnectionError) as e:
        ray_address.check(f"127.0.0.1:{port}", timeout_s=2)
    assert time.monotonic() - t < 10
    line = str(e.value)
    assert "\n" not in line
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in line
    assert f"`ray status --address 127.0.0.1:{port}`" in line


def test_a_ray_client_address_is_probed_too(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    port = dead_port()
    with pytest.raises(ConnectionError, match=rf"at ray://127.0.0.1:{port} .*--address 127.0.0.1:{port}`"):
        ray_address.check(f"ray://127.0.0.1:{port}", timeout_s=1)


def test_ray_address_in_the_environment_wins_as_in_ray(monkeypatch):
    """Ray joins $RAY_ADDRESS whatever --address says: that is the address probed and named."""
    port = dead_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    with pytest.raises(ConnectionError, match=rf"at auto \(127.0.0.1:{port}\)"):
        ray_address.check("auto", timeout_s=1)


def test_a_listening_address_passes(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with socket.create_server(("127.0.0.1", 0)) as server:
        ray_address.check(f"127.0.0.1:{server.getsockname()[1]}", timeout_s=5)


def test_the_dry_run_refuses_a_dead_address_in_one_line(monkeypatch, capsys):
    """The issue's command: it ran past 300 s printing Ray's warnings; now exit 2, one line."""
    from orchestrator import ablate

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_address, "PROBE_S", 1.0)
    port = dead_port()
    t = time.monotonic()
    rc = ablate.main(["--grid", "table3", "--cells", "KDMCSE", "--seeds", "0", "1", "--dry-run",
                      "--address", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert time.monotonic() - t < 30
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in line and "ray status --address" in line


def test_the_run_refuses_a_dead_address_before_anything_is_written(monkeypatch, capsys, tmp_path):
    from orchestrator import ablate

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_address, "PROBE_S", 1.0)
    monkeypatch.chdir(tmp_path)
    port = dead_port()
    rc = ablate.main(["--grid", "table3", "--cells", "KDMCSE", "--seeds", "0", "1",
                      "--address", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert [ln for ln in err.splitlines() if ln.strip()] == [
        f"error: no Ray cluster answers at 127.0.0.1:{port} (Connection refused); check the address "
        f"with `ray status --address 127.0.0.1:{port}` on a machine of the cluster, or start the "
        "cluster first (docs/cluster.md)"]
    assert not list(tmp_path.iterdir())  # no mlflow.db, no runs/
