"""bench/gpu_suite.py, the one GPU command, runs end to end on a CPU at tiny shapes in a process
where Ray, MLflow and Optuna cannot be imported, and writes ``gpu_suite.json`` and
``gpu_suite.md`` with every row: the official-style loop, eager and captured arrays, the peer
processes, member independence in both precisions (a check that could fail: another seed differs
beyond the tolerance), the largest array's search, the profiled step's phases and the plan with
its H100 wall time; ``--budget-s`` drops rows and names them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("ray", "mlflow", "optuna")
# Any import of a blocked package raises, so the suite must not touch them even lazily.
RUNNER = f"""
import importlib.abc, runpy, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError("blocked for this test: " + name)
sys.meta_path.insert(0, Block())
sys.argv = ["bench/gpu_suite.py", *sys.argv[1:]]
try:
    runpy.run_path("bench/gpu_suite.py", run_name="__main__")
finally:
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r})
    print("BLOCKED-LOADED", loaded, file=sys.stderr)
"""


SMALL = ["--device", "cpu", "--tiny", "--members", "2", "3", "--peers", "2", "--largest-cap", "4",
         "--independence-steps", "4", "--steps", "1", "--warmup", "2"]
"""every row of the GPU command, at tiny shapes and short rows (arrays of 2 and 3 stand for 5 and
20; the largest of them is profiled): about two minutes on one core"""


def run_suite(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the script finds the repo itself
    return subprocess.run([sys.executable, "-c", RUNNER, *args, "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-suite")
    return run_suite(out, *SMALL), out / "gpu_suite.json"


@pytest.mark.slow  # every row at tiny shapes: ~2 min; the bench join runs it
def test_runs_without_ray_mlflow_optuna(suite):
    proc, out = suite
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BLOCKED-LOADED []" in proc.stderr
    assert out.is_file() and out.with_suffix(".md").is_file()


@pytest.mark.slow  # every row at tiny shapes: ~2 min; the bench join runs it
def test_every_row_is_measured_and_written(suite):
    proc, out = suite
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["suite"] == "gpu_suite" and r["precision"] == "fp32"  # auto on a CPU
    assert r["env"]["command"].startswith("python bench/gpu_suite.py --device cpu --tiny")
    rows = r["rows"]
    kinds = {(x["loop"], x["compile"], x["members"]) for x in rows if not x["max"]}
    assert kinds == {("official", "off", 1), *(("ours", c, m) for c in ("off", "graphs")
                                                for m in (1, 2, 3))}
    for loop, compiled in (("official", "off"), ("ours", "off"), ("ours", "graphs")):
        ones = [next(iter(x["methods"])) for x in rows
                if (x["loop"], x["compile"], x["members"]) == (loop, compiled, 1)]
        assert sorted(ones) == ["dalr", "kdmcse", "mcse"], (loop, compiled)
    for x in rows:
        for k in ("step_ms", "member_steps_per_s", "tokens_per_s", "flops_per_step", "tflops",
                  "peak_mem_per_member_bytes", "steps_per_s_with_eval"):
            assert x[k] > 0, (k, x)
        assert x["member_steps_per_s"] == pytest.approx(x["members"] * 1e3 / x["step_ms"])
        assert x["mfu"] is None  # no peak on a CPU
        assert sum(x["methods"].values()) == x["members"]
        if x["loop"] == "ours" and x["members"] > 1:
            assert x["x_vs_1"] > 0 and x["x_vs_official"] > 0
        if x["compile"] == "graphs":  # the whole step ran captured, not eagerly
            assert x["captured_steps"] > 0, x
    # the peer: separate processes, summed
    (peer,) = r["peers"]["runs"]
    assert peer["processes"] == 2 and len(peer["step_ms"]) == 2
    assert peer["member_steps_per_s"] == pytest.approx(sum(1e3 / ms for ms in peer["step_ms"]))
    # independence in both precisions, with a check that can fail
    for prec in ("bf16", "fp32"):
        ind = r["independence"][prec]
        assert ind["passed"] and ind["verdict"] == "independent"
        assert ind["comparisons"]["another seed"]["max_abs_loss_diff"] > 1e-2
    assert r["independence"]["fp32"]["comparisons"]["in an array of 5"]["max_abs_loss_diff"] <= 1e-5
    # the largest array: a bounded search that tried something
    assert r["largest"]["fit"] is not None and 0 < len(r["largest"]["tried"]) <= 3
    # where the largest planned array's step goes, eager and captured
    assert {(p["members"], p["compile"]) for p in r["profiles"]} == {(3, "off"), (3, "graphs")}
    assert all(p["wall_ms"] > 0 and p["phases"] for p in r["profiles"])
    assert all(v["host_ms"] > 0 for p in r["profiles"] for v in p["phases"].values())
    # the plan: every row planned, nothing dropped, the H100 wall time stated
    plan = r["plan"]
    assert not plan["dropped"] and all(x["took_s"] is not None for x in plan["rows"])
    assert plan["default_on_h100"]["expected_s"] < 540  # the default command fits its 9 minutes
    assert not out.with_name("gpu_suite.partial.json").exists()  # replaced by the whole report
    md = out.with_suffix(".md").read_text()
    assert md == r["markdown"] + "\n" and r["markdown"] in proc.stdout
    assert md.count("\n| ours |") == sum(x["loop"] == "ours" for x in rows)
    assert "**independent**" in md and "peer (what a Tune user runs)" in md
    assert "on one H100" in proc.stderr  # the plan is printed before anything runs


def test_a_budget_drops_rows_and_names_them(tmp_path):
    proc = run_suite(tmp_path, "--device", "cpu", "--tiny", "--budget-s", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BLOCKED-LOADED []" in proc.stderr  # the default suite's check of the GPU command's imports
    r = json.loads((tmp_path / "gpu_suite.json").read_text())
    assert not r["rows"] and set(r["plan"]["dropped"]) >= {"official", "eager 1", "captured 20"}
    md = (tmp_path / "gpu_suite.md").read_text()
    assert "- not run: official (--budget-s 1:" in md


@pytest.mark.slow  # every row at tiny shapes: ~2 min; the bench join runs it
def test_the_cost_estimate_reads_the_report(suite):
    from orchestrator.analysis.cost import read_measured

    proc, out = suite
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = read_measured(out)
    ours = [x for x in json.loads(out.read_text())["rows"]
            if x["loop"] == "ours" and x["compile"] == "off" and not x["max"]]
    rows = {x["members"]: x for x in ours}
    ones = [1 / x["steps_per_s_with_eval"] for x in ours if x["members"] == 1]  # one a method
    want = {1: len(ones) / sum(ones), **{k: k * rows[k]["steps_per_s_with_eval"] for k in (2, 3)}}
    assert {k: v for k, v in m.rates.items() if k in want} == pytest.approx(want)
    assert m.precision == "fp32"  # its arrays trained in fp32 (--precision auto on a CPU)


def _tiny():
    sys.path.insert(0, str(ROOT))
    from bench import gpu_suite
    from bench.train_step import BenchConfig

    return gpu_suite, BenchConfig(device="cpu", tiny=True, members=(1, 2), batch_sizes=(8,), max_length=16,
                                  steps=1, warmup=2, windows=1, eval_pairs=(8, 8, 8))


def test_a_row_with_no_estimate_stops_at_the_end_of_the_budget(tmp_path):
    """On a CPU no row has an estimate; once the budget (counted from the process's start, here
    100 s ago) is spent, every row is dropped and named, none run."""
    import time

    gpu_suite, bc = _tiny()
    r = gpu_suite.run_suite(bc, "cmd", budget_s=50, sizes=(1, 2), independence_steps=2,
                            started=time.perf_counter() - 100, workdir=tmp_path)
    assert r["rows"] == [] and r["plan"]["dropped"]
    assert {x["name"] for x in r["plan"]["rows"]} == set(r["plan"]["dropped"])
    assert all("no estimate, 0 s left" in x["note"] for x in r["plan"]["rows"])


def test_each_row_is_saved_as_it_ends(tmp_path):
    """A run killed at its limit keeps what it measured: ``save`` gets the report so far after
    each row (here the first, the official loop's three methods, then the run is stopped)."""
    gpu_suite, bc = _tiny()
    saved = []

    def save(partial):
        saved.append(partial)
        raise KeyboardInterrupt  # the kill, right after the first row

    with pytest.raises(KeyboardInterrupt):
        gpu_suite.run_suite(bc, "cmd", sizes=(1, 2), independence_steps=2, workdir=tmp_path, save=save)
    (first,) = saved
    assert first["partial"] and json.dumps(first)  # written as JSON
    assert sorted(next(iter(x["methods"])) for x in first["rows"]) == ["dalr", "kdmcse", "mcse"]
    assert {x["loop"] for x in first["rows"]} == {"official"}
    status = {x["name"]: x["status"] for x in first["plan"]["rows"]}
    assert status["official"] == "measured" and status["eager 1"] == "planned"


@pytest.mark.slow
def test_the_peer_runs_are_separate_processes_summed(tmp_path):
    """``--peers N``: N official-style runs as processes at once, their member-steps/s summed."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.gpu_suite import packed_official
    from bench.train_step import BenchConfig

    bc = BenchConfig(device="cpu", tiny=True, batch_sizes=(8,), max_length=16, steps=2, warmup=1,
                     windows=1, eval_pairs=(8, 8, 8))
    peer = packed_official(bc, 2, tmp_path, lambda s: None)
    assert peer["processes"] == 2 and peer["methods"] == {"mcse": 1, "kdmcse": 1}
    assert len(peer["step_ms"]) == 2 and all(ms > 0 for ms in peer["step_ms"])
    assert peer["member_steps_per_s"] == pytest.approx(sum(1e3 / ms for ms in peer["step_ms"]))
