"""The paper profile on paper-sized files: each method family reads the store its official code
read, and the checks before Ray count the official steps per run (docs/official-code.md §4.3,
§5.5, §6.4). The files have the papers' row counts and small features."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SENTEVAL
from trainables.config.profiles import MCSE_STORE, PAPER_STORE, build_config
from trainables.data.schedule import count_steps, run_length

WIKI, MCSE_PAIRS, CLIP_PAIRS = 1_000_000, 29_783, 158_915


@pytest.mark.parametrize("method,pairs,steps", [("mcse", MCSE_PAIRS, 48_273), ("kdmcse", CLIP_PAIRS, 54_327),
                                                ("dalr", CLIP_PAIRS, 36_220)])
def test_each_method_gets_its_official_store_and_step_count(method, pairs, steps, monkeypatch, tmp_path):
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    cfg = build_config("paper", method)
    assert Path(cfg.data.pairs).name == (MCSE_STORE if method == "mcse" else PAPER_STORE)
    assert run_length(count_steps(WIKI, pairs, cfg.batch_size, cfg.epochs, cfg.schedule), cfg.max_steps) \
        == (steps, cfg.epochs)
    # a grid can still put every cell on one store (a controlled comparison)
    one = build_config("paper", method, {"data.pairs": str(tmp_path / "one.parquet")})
    assert Path(one.data.pairs).name == "one.parquet"


@pytest.mark.skipif(not SENTEVAL.is_dir(), reason="real SentEval data not present")
def test_table3_preflight_on_paper_sized_files_counts_the_official_steps(tiny_bert, monkeypatch, tmp_path):
    from orchestrator.run.preflight import check_data
    from orchestrator.spec.plan import plan_runs
    from orchestrator.spec.registry import load_grid
    from trainables.data.store import StoreMetadata, write_store

    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("MMEMB_DATA", str(data))
    (data / "wiki1m_for_simcse.txt").write_text("a man rides a horse\n" * WIKI)
    rng = np.random.default_rng(0)
    for name, n, clip in ((MCSE_STORE, MCSE_PAIRS, False), (PAPER_STORE, CLIP_PAIRS, True)):
        cols = {"image": rng.standard_normal((n, 8), dtype=np.float32)}
        if clip:
            cols["clip_text"] = rng.standard_normal((n, 8), dtype=np.float32)
        write_store(data / name, ["a dog"] * n, [str(i // 5) for i in range(n)], cols,
                    StoreMetadata("gen", 8, "gen" if clip else None, 8 if clip else None, False))
    profile = tmp_path / "paper-tiny.yaml"
    profile.write_text(f"base: paper\nencoder: {tiny_bert}\ndata.senteval: {SENTEVAL}\n"
                       f"data.cache_dir: {tmp_path / 'cache'}\n")
    members = plan_runs(load_grid("kdmcse_table3"), str(profile), seeds=[0, 1], seeds_from="--seeds")
    checked = check_data(members)
    by_cell = {}
    for m in members:
        by_cell.setdefault(m.cell, set()).add((checked.total_steps[m.key], Path(m.run.data.pairs).name))
    assert by_cell.pop("MCSE") == {(48_273, MCSE_STORE)}
    assert set(by_cell) == {"KDMCSE", "without AdapACSE", "without threshold filtering"}
    assert all(v == {(54_327, PAPER_STORE)} for v in by_cell.values()), by_cell
    line = checked.runs[next(m.key for m in members if m.cell == "MCSE")]
    assert line.startswith("48273 steps = 3 epoch(s) of 16091") and MCSE_STORE in line
