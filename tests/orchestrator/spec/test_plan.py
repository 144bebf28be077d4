"""Typed plans: members built once with resolved objectives, packed into arrays deterministically."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest

from orchestrator.spec.grids import Cell, Grid
from orchestrator.spec.plan import ArrayPlan, RunPlan, pack, plan_id, plan_runs
from trainables.config.profiles import build_config

GRID = Grid("t", "test", (Cell("MCSE", {"objective.method": "mcse"}),
                          Cell("KDMCSE", {"objective.method": "kdmcse"}),
                          Cell("KD m=0.15", {"objective.method": "kdmcse",
                                             "objective.grounding_margin": 0.15})),
            baseline="MCSE", seeds=(0, 1, 2))


def build(ov):
    return build_config("demo", overrides=ov)


def test_members_carry_resolved_objectives_so_explicit_defaults_hash_the_same():
    ms = plan_runs(GRID, "demo")
    assert [m.key for m in ms][:3] == ["mcse/seed-0", "mcse/seed-1", "mcse/seed-2"]
    kd = {m.key: m for m in ms}
    assert kd["kdmcse/seed-0"].run.objective.grounding_margin == 0.15  # not None
    assert kd["kdmcse/seed-0"].config_hash == kd["kd-m-0.15/seed-0"].config_hash
    assert kd["mcse/seed-0"].run.objective.lam == 1.0  # the demo recipe (MCSE.recipes)
    with pytest.raises(dataclasses.FrozenInstanceError):
        kd["mcse/seed-0"].seed = 3  # type: ignore[misc]


def test_cells_subset_keeps_the_baseline_and_unknown_cells_are_named():
    ms = plan_runs(GRID, "demo", cells=["KDMCSE"])
    assert {m.cell for m in ms} == {"MCSE", "KDMCSE"}
    with pytest.raises(ValueError, match=r"--cells \['nope'\] not in grid 't'"):
        plan_runs(GRID, "demo", cells=["nope"])


def test_pack_auto_makes_one_array_per_slot_and_explicit_sizes_cap():
    ms = plan_runs(GRID, "demo")
    keys = {m.key: "same" for m in ms}
    args = (keys, "t", "runs", 1.0, 0.0, 1)
    auto = pack(ms, *args, array_size=None, slots=2)
    assert [len(t.members) for t in auto] == [5, 4]  # 9 members, two slots
    assert pack(ms, *args, array_size=None, slots=1)[0].members == tuple(ms)
    ones = pack(ms, *args, array_size=1, slots=2)
    assert len(ones) == 9 and all(len(t.members) == 1 for t in ones)
    assert ones[0].label == "MCSE seed 0"
    assert [len(t.members) for t in pack(ms, *args, array_size=4, slots=2)] == [3, 3, 3]
    # incompatible members never share an array
    split = {m.key: m.cell for m in ms}
    assert all(len({m.cell for m in t.members}) == 1 for t in pack(ms, split, *args[1:], None, 1))
    with pytest.raises(ValueError, match="--array-size 0"):
        pack(ms, *args, array_size=0, slots=1)


def test_groups_stay_together_and_names_are_stable_per_member_set():
    ms = [RunPlan(f"c{c}/s{s}", f"c{c}", s, build({"objective.method": "mcse", "seed": s}),
                     "x", "x", group=f"c{c}") for c in range(3) for s in range(3)]
    keys = {m.key: "same" for m in ms}
    trials = pack(ms, keys, "s", "runs", 1.0, 0.0, 1, array_size=4, slots=1)
    for t in trials:  # 3-member groups are never split across arrays
        assert len({m.group for m in t.members}) == len(t.members) // 3
    again = pack(ms, keys, "s", "runs", 1.0, 0.0, 1, array_size=4, slots=1)
    assert [t.name for t in trials] == [t.name for t in again]
    t = trials[0]
    assert t.without([]) is t and t.without([m.key for m in t.members]) is None
    rest = t.without([t.members[0].key])
    assert isinstance(rest, ArrayPlan) and rest.name != t.name  # a new member set, a new run
    # the same members under another parent (a plain rerun) are another Train run; under the
    # same parent (--resume reopens it) the same one, whose checkpoints it continues
    mine = replace(t, parent="p1")
    assert mine.name != t.name and mine.name != replace(t, parent="p2").name
    assert mine.name == replace(t, parent="p1").name
    # the dry run (no parent yet) and the run label the array alike
    assert mine.label == t.label == replace(t, parent="p2").label
    assert t.label == f"array {t.name[-6:]} ({len(t.members)} members)"


def test_plan_id_depends_on_members_not_packing():
    ms = plan_runs(GRID, "demo")
    assert plan_id("table", "t", ms, "demo") == plan_id("table", "t", list(ms), "demo")
    assert plan_id("table", "t", ms[:-1], "demo") != plan_id("table", "t", ms, "demo")


def test_origins_name_the_layer_that_set_each_setting(tmp_path):
    from orchestrator.run.dry_run import explain
    from orchestrator.spec.registry import load_grid

    runs = plan_runs(load_grid("table3"), "demo", seeds=[0, 1], seeds_from="--seeds")
    by_cell = {r.cell: r.origins for r in runs}
    assert set(by_cell) == {"MCSE", "KDMCSE", "without AdapACSE", "without threshold filtering"}
    for cell, o in by_cell.items():
        assert o["objective.lam"] == f"recipe {'mcse' if cell == 'MCSE' else 'kdmcse'} (demo)"
        assert o["lr"] == "profile demo" and o["seed"] == "--seeds"
        if cell != "MCSE":  # mcse is the field default: not listed
            assert o["objective.method"] == f"cell {cell}"
    assert "objective.method" not in by_cell["MCSE"]
    assert by_cell["KDMCSE"]["objective.text_margin"] == "method default (official code)"
    assert by_cell["without AdapACSE"]["objective.adaptive_margin"] == "cell without AdapACSE"
    assert "objective.threshold" not in by_cell["without threshold filtering"]  # at its default
    # a later layer wins: a grid base sets lr, a cell overrides it
    g = Grid("g", "t", (Cell("A", {"objective.method": "mcse"}),
                        Cell("B", {"objective.method": "mcse", "lr": 1e-3})),
             baseline="A", seeds=(0, 1), base={"lr": 2e-4, "objective.lam": 0.5})
    o = {r.cell: (r.run.lr, r.origins["lr"], r.origins["objective.lam"]) for r in plan_runs(g, "demo")}
    assert o == {"A": (2e-4, "grid g base", "grid g base"), "B": (1e-3, "cell B", "grid g base")}
    text = explain(runs)
    assert "KDMCSE (seeds 0 1):" in text
    assert any(line.split()[:3] == ["objective.lam", "1.0", "recipe"] for line in text.splitlines())
    # a YAML profile's own settings are named by its file
    prof = tmp_path / "mine.yaml"
    prof.write_text("data.demo: true\nencoder: minilm-l6-top1\nlr: 1.0e-4\nmax_steps: 5\n")
    (r,) = [r for r in plan_runs(g, str(prof), seeds=[0, 1]) if r.cell == "A"][:1]
    assert r.origins["max_steps"] == "profile mine" and r.origins["lr"] == "grid g base"


def test_auto_packing_never_makes_an_array_of_a_thousand_members():
    from orchestrator.spec.plan import AUTO_MAX_MEMBERS

    cfg = build_config("demo", "mcse")
    ms = [RunPlan(f"c/s{s}", "c", s, cfg, "x", "x") for s in range(300)]
    arrays = pack(ms, {m.key: "same" for m in ms}, "s", "runs", 1.0, 0.0, 1, array_size=None,
                  slots=1)
    assert max(len(t.members) for t in arrays) <= AUTO_MAX_MEMBERS
    assert sum(len(t.members) for t in arrays) == 300
