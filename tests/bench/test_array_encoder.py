"""bench/array_encoder.py: a tiny two-member run times every approach and finds vmap's dropout
masks depend on the array size while StackedEncoder's do not."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "array_encoder.py"


def test_tiny_run_reports_rows_and_independence(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_array_encoder", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = tmp_path / "r.json"
    module.main(["--tiny", "--batch-size", "2", "--max-length", "8", "--members", "1", "2",
                 "--ragged", "--warmup", "0", "--steps", "1", "--windows", "1", "--json", str(out)])
    report = json.loads(out.read_text())
    rows = {(r["approach"], r["members"]) for r in report["results"]}
    assert rows == {(a, m) for a in ("loop", "vmap", "stacked") for m in (1, 2)}
    assert all(r["step_ms"] > 0 and r["tokens_per_s"] > 0 for r in report["results"])
    assert report["member0_drift"]["stacked"] == 0.0
    assert report["member0_drift"]["vmap"] > 1e-3
    assert "# command" in capsys.readouterr().out
