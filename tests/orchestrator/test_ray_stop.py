"""orchestrator.ray_stop stops the Ray instance of one temp dir, its retitled children included,
and leaves every other process alone (a colleague's Ray on a shared lab machine)."""

from __future__ import annotations

import subprocess
import time

from orchestrator import ray_stop


def _spawn(folder) -> subprocess.Popen:
    # a "raylet" naming its temp dir, with a child that does not (as ray::IDLE workers)
    return subprocess.Popen(["bash", "-c", f"sleep 300 & wait; : --temp_dir={folder}"])


def _children(p: subprocess.Popen) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout
        if kids.split():
            return [int(k) for k in kids.split()]
        time.sleep(0.05)
    raise AssertionError("the child did not start")


def test_only_the_instance_of_its_temp_dir_stops(tmp_path, capsys):
    ours, theirs = tmp_path / "ray-mmemb-lab", tmp_path / "ray-mmemb-lab2"
    mine, other = _spawn(ours), _spawn(theirs)
    left = _children(other)
    try:
        kid = _children(mine)[0]
        found = {p.pid for p in ray_stop.processes(ours)}
        assert found == {mine.pid, kid}  # not the other instance, whose path only starts alike
        assert ray_stop.main(["--temp-dir", str(ours), "--grace", "5"]) == 0
        assert mine.wait(timeout=30) is not None
        assert other.poll() is None  # the colleague's instance runs on
        assert "stopped the 2 Ray process(es)" in capsys.readouterr().out
        assert ray_stop.main(["--temp-dir", str(ours)]) == 0
        assert "no Ray process of" in capsys.readouterr().out
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()
        for pid in left:  # the other instance's child, by its id
            subprocess.run(["kill", str(pid)], check=False)
