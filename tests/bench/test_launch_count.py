"""bench/launch_count.py at tiny widths (BERT-base depth): the stacked encoder's forward and
backward launch the same kernels whatever the member count, the dropout draws add exactly three
per member (one uniform_ and two compares), every other phase grows exactly linearly with the
members (nothing shared grows faster), and the counts do not depend on the hidden size."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench" / "launch_count.py"


@pytest.fixture(scope="module")
def lc():
    spec = importlib.util.spec_from_file_location("bench_launch_count", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows(lc, tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    bc = lc.BenchConfig(device="cpu", methods=("mcse",), batch_sizes=(4,), max_length=8, eval_pairs=(4, 4, 4))
    root = tmp_path_factory.mktemp("launch")
    out = {w: lc.measure(w, [1, 2, 4] if w == 24 else [1, 2], "pair", bc, ["mcse"], 1, 1, root)
           for w in (24, 48)}
    torch.set_num_threads(threads)
    return out


def test_encoder_constant_dropout_three_per_member_rest_linear(rows):
    one, two, four = rows[24]
    k = [r["kernels_by_phase"] for r in (one, two, four)]
    for phase in ("encoder", "backward: encoder"):
        assert k[0][phase] == k[1][phase] == k[2][phase] > 100, phase
    assert k[1]["dropout draws"] - k[0]["dropout draws"] == 3
    assert k[2]["dropout draws"] - k[1]["dropout draws"] == 2 * 3
    for phase in set(k[0]) | set(k[2]):
        a, b, c = (x.get(phase, 0) for x in k)
        assert c - b == 2 * (b - a), phase  # affine in M: no phase grows faster than the members
    for r in (one, two, four):
        assert r["kernels"] == sum(r["kernels_by_phase"].values()) < r["ops"] == sum(r["ops_by_phase"].values())
    # the members of a method run their heads and losses as one batched computation: as many
    # kernels for four members as for one, forward and backward (trainables/arrays/batched.py)
    for phase in ("heads + objective", "backward: heads + objective"):
        assert k[0][phase] == k[1][phase] == k[2][phase] > 0, phase
    assert (four["kernels"] - one["kernels"]) / 3 <= 15  # the bound per extra member


def test_counts_do_not_depend_on_the_hidden_size(rows):
    for a, b in zip(rows[24][:2], rows[48], strict=True):
        assert a["members"] == b["members"]
        assert a["kernels_by_phase"] == b["kernels_by_phase"] and a["ops"] == b["ops"]


def test_slopes_summary(lc, rows):
    s = lc.slopes(rows[24] + rows[48])["24/pair"]
    one, four = rows[24][0], rows[24][2]
    assert s["one_member"] == one["kernels"] and s["encoder_constant"]
    assert s["per_extra_member"] == (four["kernels"] - one["kernels"]) / 3
    assert s["per_extra_member_by_phase"]["dropout draws"] == 3
    assert "encoder" not in s["per_extra_member_by_phase"]
    text = lc.format_rows(rows[24])
    assert text.count("\n| 24 |") == 3 and "dropout draws" in text
