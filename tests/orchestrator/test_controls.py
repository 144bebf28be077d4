"""Cell.seed_offset and the two control grids: what they run, and (slow) what they must show."""

from __future__ import annotations

import pickle

import pytest

from orchestrator.grids import Cell, Grid, expand
from orchestrator.plan import plan_members
from orchestrator.registry import load_grid
from orchestrator.validate import validate_grid
from trainables.profiles import build_config

M = {"objective.method": "mcse"}


def test_seed_offset_moves_the_run_seed_not_the_key_or_pairing():
    g = Grid("toy", "toy", (Cell("A", M), Cell("B", M, seed_offset=100)), baseline="A", seeds=(3, 7))
    trials = expand(g)
    b = [t for t in trials if t.cell == "B"]
    assert [(t.key, t.seed, t.overrides["seed"]) for t in b] == [("b/seed-3", 3, 103), ("b/seed-7", 7, 107)]
    a = [t for t in trials if t.cell == "A"]
    assert [t.overrides["seed"] for t in a] == [3, 7]  # offset 0: unchanged
    assert pickle.loads(pickle.dumps(b[0])) == b[0]
    # A seed override list is offset the same way.
    assert [t.overrides["seed"] for t in expand(g, seeds=(0,)) if t.cell == "B"] == [100]


def test_seed_offset_must_be_an_int():
    with pytest.raises(ValueError, match="seed_offset must be an int"):
        Cell("B", M, seed_offset=1.5)
    with pytest.raises(ValueError, match="seed_offset must be an int"):
        Cell("B", M, seed_offset=True)


def test_negative_control_members_train_disjoint_seeds_but_pair_by_grid_seed():
    g = load_grid("control_negative")
    validate_grid(g)
    members = plan_members(g, lambda ov: build_config("demo", overrides=ov))
    base = [m for m in members if m.cell == g.baseline]
    other = [m for m in members if m.cell != g.baseline]
    assert [m.seed for m in base] == [m.seed for m in other] == list(g.seeds)  # the pairing
    assert {m.run.seed for m in base}.isdisjoint({m.run.seed for m in other})  # the runs
    assert {m.run.with_overrides({"seed": 0}).config_hash() for m in members} == {
        base[0].run.with_overrides({"seed": 0}).config_hash()}  # one configuration
    assert len({m.key for m in members}) == len(members)
    assert "no significant" in g.title.lower()


def test_positive_control_is_simcse_against_mcse_with_the_published_direction():
    g = load_grid("control_positive")
    validate_grid(g)
    methods = {c.name: build_config("demo", overrides=dict(c.overrides)).objective.method for c in g.cells}
    assert methods == {"MCSE": "mcse", "SimCSE": "simcse"} and g.baseline == "MCSE"
    pub = g.published
    assert pub["SimCSE"]["avg"] < pub["MCSE"]["avg"]  # the papers' direction: MCSE wins
    assert "must beat" in g.title
