"""bench/gpu_suite.py: ``python bench/gpu_suite.py --device cpu --tiny`` runs end to end in a
process where Ray, MLflow and Optuna cannot be imported, and writes a JSON report and a Markdown
table whose figures are sane: every row's rates positive and consistent with its step time, the
arrays of 1, 5 and 20 and the official-style baseline present, a member-independence verdict
that could have failed (another seed differs beyond the tolerance)."""

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


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-suite") / "suite.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the script finds the repo itself
    proc = subprocess.run([sys.executable, "-c", RUNNER, "--device", "cpu", "--tiny", "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    return proc, out


def test_runs_without_ray_mlflow_optuna(suite):
    proc, out = suite
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BLOCKED-LOADED []" in proc.stderr
    assert out.is_file() and out.with_suffix(".md").is_file()


def test_report_structure_and_sanity(suite):
    proc, out = suite
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["suite"] == "gpu_suite" and r["precision"] == "fp32"  # auto on a CPU
    assert r["env"]["command"].startswith("python bench/gpu_suite.py --device cpu --tiny")
    rows = r["rows"]
    kinds = {(x["loop"], x["members"]) for x in rows}
    assert kinds == {("official", 1), ("ours", 1), ("ours", 5), ("ours", 20)}
    assert sorted(next(iter(x["methods"])) for x in rows if x["loop"] == "official") == ["dalr", "kdmcse", "mcse"]
    for x in rows:
        for k in ("step_ms", "member_steps_per_s", "tokens_per_s", "flops_per_step", "tflops",
                  "peak_mem_per_member_bytes", "steps_per_s_with_eval", "eval_s"):
            assert x[k] > 0, (k, x)
        assert x["member_steps_per_s"] == pytest.approx(x["members"] * 1e3 / x["step_ms"])
        assert x["tokens_per_s"] == pytest.approx(2 * 16 * 16 * x["members"] * 1e3 / x["step_ms"])
        assert x["mfu"] is None  # no peak on a CPU
        assert sum(x["methods"].values()) == x["members"]
        if x["loop"] == "ours" and x["members"] > 1:
            assert x["x_vs_1"] > 0 and x["x_vs_official"] > 0
    twenty = next(x for x in rows if x["members"] == 20)
    assert twenty["methods"] == {"mcse": 7, "kdmcse": 7, "dalr": 6}
    assert "skipped" in r["largest"]  # a GPU figure
    ind = r["independence"]
    assert ind["verdict"] == "independent" and ind["passed"]
    assert ind["steps"] == 20 and ind["array_of_5"] == ["mcse", "kdmcse", "dalr", "mcse", "kdmcse"]
    c = ind["comparisons"]
    assert c["in an array of 5"]["max_abs_loss_diff"] <= 1e-5  # fp32: the contract of test_trainer
    assert c["another seed"]["max_abs_loss_diff"] > 1e-2  # the check can see a real difference
    assert {"text", "total"} <= set(ind["loss_terms"])
    assert all(len(v) == 20 for v in ind["curves"].values())
    for name in ("official-style loop", "arrays of 1", "arrays of 5", "arrays of 20", "independence"):
        assert r["parts"][name]["took_s"] > 0 and r["parts"][name]["member_steps"] > 0
    md = out.with_suffix(".md").read_text()
    assert md == r["markdown"] + "\n" and md.count("\n| ours |") == 5 and "**independent**" in md
    assert r["markdown"] in proc.stdout


def test_the_cost_estimate_reads_the_report(suite):
    from orchestrator.analysis.cost import read_measured

    proc, out = suite
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = read_measured(out)
    ours = [x for x in json.loads(out.read_text())["rows"] if x["loop"] == "ours"]
    rows = {x["members"]: x for x in ours}
    ones = [1 / x["steps_per_s_with_eval"] for x in ours if x["members"] == 1]  # one a method
    want = {1: len(ones) / sum(ones), **{k: k * rows[k]["steps_per_s_with_eval"] for k in (5, 20)}}
    assert m.rates == pytest.approx(want)
    assert m.flops_per_member_step == pytest.approx(rows[5]["flops_per_step"] / 5)
    # its arrays trained in fp32 (--precision auto on a CPU): it prices fp32 plans only
    assert m.precision == json.loads(out.read_text())["precision"] == "fp32"


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
