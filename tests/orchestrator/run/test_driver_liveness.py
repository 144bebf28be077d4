"""A driver lock's holder on this host that is gone is stale at once, heartbeat or not."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time

import pytest

from orchestrator.run.driver import (
    DRIVER_TAG,
    HEARTBEAT_TAG,
    STALE_S,
    check_store,
    live_driver,
    process_start,
)
from orchestrator.tracking.client import Tracker


def holder(pid: int, start: int | None, host: str | None = None) -> str:
    return json.dumps({"pid": pid, "pid_start": start, "host": host or socket.gethostname(),
                       "started": time.time(), "command": "python -m orchestrator.ablate"})


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def beat(now: float) -> str:
    return f"{now:.0f}"


def test_a_killed_driver_on_this_host_is_stale_at_once(tmp_path, child):
    """The issue's case: `ray up` killed the driver; `--resume` was refused for five minutes."""
    tr = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    start = process_start(child.pid)
    assert start is not None
    tr.start_parent("t", "table", "plan1", {DRIVER_TAG: holder(child.pid, start),
                                            HEARTBEAT_TAG: beat(time.time())})
    with pytest.raises(ValueError, match=f"already running: process {child.pid} on host"):
        check_store(tr, "plan1", "the table", queue=False)  # alive: refused
    child.kill()
    child.wait()
    check_store(tr, "plan1", "the table", queue=False)  # gone: resumed at once


def test_a_pid_given_to_a_later_process_is_not_the_driver(child):
    start = process_start(child.pid)
    tags = {DRIVER_TAG: holder(child.pid, start + 1), HEARTBEAT_TAG: beat(time.time())}
    assert live_driver(tags) is None
    tags[DRIVER_TAG] = holder(child.pid, start)
    assert live_driver(tags)["pid"] == child.pid


def test_a_driver_on_another_host_is_trusted_until_stale_and_the_line_says_how_long(tmp_path):
    tr = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    now = time.time()
    tr.start_parent("t", "table", "plan1", {DRIVER_TAG: holder(7, 1, "elsewhere"),
                                            HEARTBEAT_TAG: beat(now - 100)})
    with pytest.raises(ValueError) as e:
        check_store(tr, "plan1", "the table", queue=False)
    line = str(e.value)
    assert "process 7 on host elsewhere" in line and "\n" not in line
    m = re.search(r"its last heartbeat is (\d+) s old: .* run this again in (\d+) s \(at ", line)
    assert m, line
    assert int(m[1]) + int(m[2]) == pytest.approx(STALE_S, abs=3)
