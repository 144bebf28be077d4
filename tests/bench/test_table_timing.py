"""bench/table_timing.py's reading of where a table's seconds go: the driver's output lines and
Tune's result.json per trial, as the real command writes them, put on one clock, each phase read
on the array that ends last (the table's wall time is that array's)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "table_timing.py"


@pytest.fixture(scope="module")
def tt():
    spec = importlib.util.spec_from_file_location("bench_table_timing", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _trial(runs: Path, name: str, start: float, rows: list[tuple[float, dict]]) -> None:
    """A result.json as Tune writes it: whole-second wall-clock stamps, exact seconds since the
    trial's start."""
    folder = runs / "table-abc" / name
    folder.mkdir(parents=True)
    lines = [json.dumps({**r, "timestamp": int(start + t), "time_total_s": t}) for t, r in rows]
    (folder / "result.json").write_text("\n".join(lines) + "\n")


def test_phases_follow_the_array_that_ends_last(tt, tmp_path):
    epoch0 = 1_000_000.0
    # array A: trial starts 10 s after the command, trains 30 s in, evaluates at 90, ends at 100
    _trial(tmp_path, "t-00000", epoch0 + 10,
           [(30.0, {"step": 0, "total_steps": 60, "progress": 1}),
            (60.0, {"step": 30, "total_steps": 60}),
            (90.0, {"step": 60, "total_steps": 60, "evaluating": "STS", "progress": 1}),
            (100.0, {"step": 60, "total_steps": 60, "final": 1})])
    # array B starts later and ends last: the phases are read on it
    _trial(tmp_path, "t-00001", epoch0 + 12,
           [(35.0, {"step": 0, "total_steps": 60, "progress": 1}),
            (95.0, {"step": 60, "total_steps": 60, "evaluating": "STS", "progress": 1}),
            (115.0, {"step": 60, "total_steps": 60, "final": 1})])
    arrays = tt.trials(tmp_path, epoch0)
    assert [a["start"] for a in arrays] == [10, 12]
    assert [a["final"] for a in arrays] == [110, 127]
    lines = [(2.0, "kdmcse_table3 (demo): starting Ray on this machine\n"),
             (8.0, "MLflow parent run 0f37 at sqlite:///mlflow.db\n"),
             (8.1, "[0m00s] 2 arrays (20 runs) starting\n")]
    ph = tt.phases(lines, 131.5, arrays)
    assert list(ph.values()) == pytest.approx([2.0, 6.0, 2.0, 47 - 10, 60.0, 20.0, 4.5])
    assert sum(ph.values()) == pytest.approx(131.5)  # every second is in one phase


def test_phases_unread_without_results(tt, tmp_path):
    lines = [(2.0, "x: starting Ray on this machine\n"), (8.0, "MLflow parent run 1 at y\n")]
    assert tt.trials(tmp_path, 0.0) == []
    assert tt.phases(lines, 20.0, []) is None


def test_rounds_are_said_not_priced(tt, capsys):
    """With more arrays than run at once, the last round's phases are not the table's: the
    fixed-cost ratio is left out and the reason said."""
    ph = {"training (dev evaluations included)": 50.0, "final evaluation": 10.0, "other": 40.0}
    at_once = [{"trial": "a", "start": 1.0, "training": 5.0, "evaluating": 50.0, "final": 60.0},
               {"trial": "b", "start": 2.0, "training": 6.0, "evaluating": 55.0, "final": 65.0}]
    tt.print_phases({"wall_s": 100.0, "phases": ph, "trials": at_once})
    assert ("FIXED COSTS 67% of training and final evaluation (40 s against 60 s; goal: within "
            "20%: NOT met)") in capsys.readouterr().out
    rounds = [at_once[0], {**at_once[1], "start": 61.0}]
    tt.print_phases({"wall_s": 100.0, "phases": ph, "trials": rounds})
    out = capsys.readouterr().out
    assert "ran in rounds" in out and "FIXED COSTS" not in out
