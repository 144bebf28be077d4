"""bench/train_step.py: a two-step CPU run of a mixed array of two tiny members (with the arrays of 1
and the official-style runs it is compared with) reports every field, with FLOPs from an
independently counted BERT layer; the 'max' doubling stops at the first out-of-memory error;
packed reports add up."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench" / "train_step.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_train_step", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_layer_params(h: int) -> int:
    """One BertLayer by hand: Q, K, V, O (h x h + h each), two LayerNorms (2h each),
    intermediate (h x 4h + 4h), output (4h x h + h)."""
    return 4 * (h * h + h) + 2 * (2 * h) + (h * 4 * h + 4 * h) + (4 * h * h + h)


def test_two_steps_of_a_mixed_array_of_two(bench, tmp_path):
    bs, length = 8, 16
    cfg = bench.BenchConfig(device="cpu", tiny=True, members=(2,), batch_sizes=(bs,), max_length=length,
                            warmup=0, steps=2, windows=1, eval_pairs=(12, 8, 6), peak_tflops=1.0)
    report = bench.run_benchmark(cfg, "pytest", workdir=tmp_path)
    rows = report["results"]
    key = {(r["loop"], r["members"], tuple(sorted(r["methods"].items()))) for r in rows}
    assert key == {("official", 1, ((m, 1),)) for m in ("mcse", "kdmcse", "dalr")} \
        | {("ours", 1, ((m, 1),)) for m in ("mcse", "kdmcse", "dalr")} \
        | {("ours", 2, (("kdmcse", 1), ("mcse", 1)))}  # member 0 MCSE, member 1 KDMCSE
    per_member = 6 * 2 * tiny_layer_params(64) * (2 * bs * length) + 12 * 2 * length * 64 * (2 * bs * length)
    for r in rows:
        m = r["members"]
        for k in ("step_ms", "steps_per_s", "steps_per_s_with_eval", "tokens_per_s",
                  "flops_per_step", "tflops", "mfu", "peak_mem_bytes", "eval_s"):
            assert r[k] > 0, (k, r)
        assert len(r["window_ms"]) == 1 and not r["max"]
        assert r["flops_per_step"] == pytest.approx(m * per_member)  # summed over members
        assert r["tokens_per_s"] == pytest.approx(2 * bs * length * m * r["steps_per_s"])
        assert r["mfu"] == pytest.approx(r["tflops"] / 1.0)  # peak given as 1 TFLOP/s
        assert r["peak_mem_per_member_bytes"] == pytest.approx(r["peak_mem_bytes"] / m)
        assert r["steps_per_s_with_eval"] < r["steps_per_s"]
        assert (r["checkpoint_s"] > 0) if (r["loop"], m) == ("ours", 1) else r["checkpoint_s"] is None
        assert r["eval_sentences"] == (2 * 26 if r["loop"] == "official" else 2 * 8)
    ms = {(r["loop"], r["members"], next(iter(r["methods"]))): r["step_ms"] for r in rows}
    pair = next(r for r in rows if r["members"] == 2)
    # the two members trained one by one as arrays of 1 (official-style runs) over the array's step
    assert pair["x_vs_1"] == pytest.approx((ms["ours", 1, "mcse"] + ms["ours", 1, "kdmcse"]) / pair["step_ms"])
    assert pair["x_vs_official"] == pytest.approx(
        (ms["official", 1, "mcse"] + ms["official", 1, "kdmcse"]) / pair["step_ms"])
    assert all(r["x_vs_1"] == pytest.approx(1.0) for r in rows if (r["loop"], r["members"]) == ("ours", 1))
    assert all(r["x_vs_1"] is None for r in rows if r["loop"] == "official")
    assert report["max"] is None
    assert report["env"]["command"] == "pytest" and report["env"]["torch"] and report["env"]["packed"] == 1
    text = bench.format_report(report)
    assert "mcse 1, kdmcse 1" in text and "save_state" in text and text.count("\n") >= 8


def test_max_doubles_until_out_of_memory(bench):
    measured = []

    def measure(m):
        measured.append(m)
        if m >= 16:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return {"members": m}

    best, info = bench.grow_to_max(measure, 2, None)
    assert measured == [2, 4, 8, 16] and best == {"members": 8}
    assert info == {"fit": 8, "oom_at": 16, "stopped_by": "out of memory"}
    measured.clear()
    best, info = bench.grow_to_max(measure, 3, 10)  # the cap stops it first
    assert measured == [3, 6] and best == {"members": 6} and info["stopped_by"] == "cap 10"

    def cublas(m):
        raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)")

    assert bench.grow_to_max(cublas, 40, None)[1] == {"fit": None, "oom_at": 40, "stopped_by": "out of memory"}

    def broken(m):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):  # only out-of-memory ends the search
        bench.grow_to_max(broken, 2, None)


def test_max_on_cpu_is_capped(bench, tmp_path):
    cfg = bench.BenchConfig(device="cpu", tiny=True, methods=("mcse",), members=(1, "max"), max_members=2,
                            batch_sizes=(4,), max_length=8, warmup=0, steps=1, windows=1,
                            eval_pairs=(4, 4, 4), loops=("ours",))
    report = bench.run_benchmark(cfg, "pytest", workdir=tmp_path)
    assert [(r["members"], r["max"]) for r in report["results"]] == [(1, False), (2, True)]
    assert report["max"] == {"fit": 2, "oom_at": None, "stopped_by": "cap 2", "batch_size": 4}
    assert "max: M=2 fit (row marked *), stopped by cap 2" in bench.format_report(report)


def test_targets_line_and_packed_reports(bench, tmp_path, capsys):
    row = {"loop": "ours", "members": 20, "methods": {"mcse": 7, "kdmcse": 7, "dalr": 6}, "batch_size": 64,
           "step_ms": 100.0, "tokens_per_s": 819200.0, "tflops": 400.0, "mfu": 0.40,
           "peak_mem_per_member_bytes": 2**31, "x_vs_1": 9.0, "x_vs_official": 20.0,
           "steps_per_s_with_eval": 9.5, "eval_s": 1.0, "checkpoint_s": None, "max": False}
    report = {"env": {"packed": 1}, "results": [row], "max": None}
    assert "MFU 40.0% (>= 35%), 9.00x one member's tokens/s (>= 8x): met" in bench.format_report(report)
    report["results"] = [{**row, "mfu": 0.2}]
    assert ": NOT met" in bench.format_report(report)
    one = {"loop": "ours", "members": 1, "methods": {"mcse": 1}, "batch_size": 64, "step_ms": 40.0,
           "tokens_per_s": 100.0, "tflops": 1.5, "mfu": 0.01}
    files = []
    for i, ms in enumerate((40.0, 44.0)):
        files.append(tmp_path / f"pack2_{i}.json")
        files[-1].write_text(json.dumps({"results": [{**one, "step_ms": ms}]}))
    s = bench.sum_packed([json.loads(f.read_text()) for f in files])
    (r,) = s["results"]
    assert s["packed"] == 2 and r["processes"] == 2 and r["step_ms"] == [40.0, 44.0]
    assert r["tokens_per_s"] == 200.0 and r["tflops"] == 3.0 and r["mfu"] == pytest.approx(0.02)
    bench.main(["--sum-packed", *map(str, files)])
    assert "200 tokens/s together" in capsys.readouterr().out


def test_bad_settings_fail_with_one_clear_line(bench):
    with pytest.raises(ValueError, match="unknown method"):
        bench.BenchConfig(methods=("simcse2",))
    with pytest.raises(ValueError, match="batch sizes"):
        bench.BenchConfig(batch_sizes=(1,))
    with pytest.raises(ValueError, match="--max-members"):
        bench.BenchConfig(members=(1, "max"))  # CPU: nothing would stop the doubling
    for members in ((0,), (1, 1), ("max", "max"), ()):
        with pytest.raises(ValueError, match="distinct array sizes"):
            bench.BenchConfig(members=members)
    with pytest.raises(ValueError, match="below the largest"):
        bench.BenchConfig(members=(1, 8, "max"), max_members=4)
    assert bench.BenchConfig().mix(5) == ["mcse", "kdmcse", "dalr", "mcse", "kdmcse"]
    assert bench.BenchConfig(methods=("dalr",)).mix(2) == ["dalr", "dalr"]
