"""bench/train_step.py: the core function runs both loops for every method on the tiny model on CPU
and reports every field, with FLOPs from an independently counted BERT layer."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "train_step.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_train_step", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def tiny_layer_params(h: int) -> int:
    """One BertLayer by hand: Q, K, V, O (h x h + h each), two LayerNorms (2h each),
    intermediate (h x 4h + 4h), output (4h x h + h)."""
    return 4 * (h * h + h) + 2 * (2 * h) + (h * 4 * h + 4 * h) + (4 * h * h + h)


def test_two_steps_every_method_both_loops(bench, tmp_path):
    bs, length = 8, 16
    cfg = bench.BenchConfig(device="cpu", tiny=True, batch_sizes=(bs,), max_length=length,
                            warmup=0, steps=2, windows=1, eval_pairs=(12, 8, 6), peak_tflops=1.0)
    report = bench.run_benchmark(cfg, "pytest", workdir=tmp_path)
    rows = report["results"]
    assert {(r["loop"], r["method"]) for r in rows} == {
        (loop, m) for loop in ("ours", "official") for m in ("mcse", "kdmcse", "dalr")}
    tokens = 2 * bs * length  # two dropout views
    flops = 6 * 2 * tiny_layer_params(64) * tokens + 12 * 2 * length * 64 * tokens
    for r in rows:
        for key in ("step_ms", "steps_per_s", "steps_per_s_with_eval", "tokens_per_s",
                    "flops_per_step", "tflops", "mfu", "peak_mem_bytes", "eval_s"):
            assert r[key] > 0, (key, r)
        assert len(r["window_ms"]) == 1
        assert r["flops_per_step"] == pytest.approx(flops)
        assert r["tokens_per_s"] == pytest.approx(tokens * r["steps_per_s"])
        assert r["mfu"] == pytest.approx(r["tflops"] / 1.0)  # peak given as 1 TFLOP/s
        assert r["steps_per_s_with_eval"] < r["steps_per_s"]
        assert (r["checkpoint_s"] > 0) if r["loop"] == "ours" else r["checkpoint_s"] is None
        assert r["eval_sentences"] == (2 * 26 if r["loop"] == "official" else 2 * 8)
    assert len(report["speedups"]) == 3
    assert all(s["train"] > 0 and s["with_eval"] > 0 for s in report["speedups"])
    assert report["env"]["command"] == "pytest" and report["env"]["torch"]
    text = bench.format_report(report)
    assert "speed-up" in text and text.count("\n") >= 8


def test_bad_settings_fail_with_one_clear_line(bench):
    with pytest.raises(ValueError, match="unknown method"):
        bench.BenchConfig(methods=("simcse2",))
    with pytest.raises(ValueError, match="batch sizes"):
        bench.BenchConfig(batch_sizes=(1,))
