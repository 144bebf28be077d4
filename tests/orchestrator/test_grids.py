"""Grid mechanics: expansion, trial keys, validation errors, ranges, registry and param decoding."""

from __future__ import annotations

import pickle
from pathlib import Path

import optuna
import pytest

from orchestrator.grids import Cell, Grid, expand
from orchestrator.registry import list_text, load_grid, load_space
from orchestrator.spaces import (
    FloatRange,
    SearchSpace,
    check_choices,
    check_range,
    params_to_overrides,
)
from orchestrator.validate import validate_grid, validate_space
from tests.search_spaces.entries import list_grids, list_spaces
from trainables.profiles import teacher_overrides

M = {"objective.method": "mcse"}


def _grid(**kw) -> Grid:
    args = dict(
        name="toy", title="toy grid",
        cells=(Cell("KDMCSE", {"objective.method": "kdmcse", "lr": 2e-5}),
               Cell("MCSE", M, {"avg": 77.3}),
               Cell("w/o AdapACSE", {"objective.method": "kdmcse", "objective.adaptive_margin": False})),
        baseline="MCSE", seeds=(3, 7), base={"lr": 1e-5, "batch_size": 8},
    )
    args.update(kw)
    return Grid(**args)


def _no_build(overrides):  # validation logic without RunConfig
    return None


# --- expansion -----------------------------------------------------------------------------
def test_expand_cells_times_seeds_baseline_first_same_seeds():
    trials = expand(_grid())
    assert len(trials) == 3 * 2
    assert [(t.cell, t.seed) for t in trials[:2]] == [("MCSE", 3), ("MCSE", 7)]
    by_cell = {}
    for t in trials:
        by_cell.setdefault(t.cell, []).append(t.seed)
    assert by_cell == {"MCSE": [3, 7], "KDMCSE": [3, 7], "w/o AdapACSE": [3, 7]}
    k = next(t for t in trials if t.cell == "KDMCSE" and t.seed == 7)
    # base, then the cell (which wins on lr), then the seed
    assert dict(k.overrides) == {"lr": 2e-5, "batch_size": 8, "objective.method": "kdmcse", "seed": 7}
    assert k.grid == "toy"


def test_expand_seed_override_and_bad_seeds():
    assert {t.seed for t in expand(_grid(), seeds=[0])} == {0}
    with pytest.raises(ValueError, match="distinct"):
        expand(_grid(), seeds=[1, 1])
    with pytest.raises(ValueError, match="non-empty"):
        expand(_grid(), seeds=[])


def test_trial_keys_stable_unique_and_picklable():
    trials = expand(_grid())
    keys = [t.key for t in trials]
    assert "w-o-adapacse/seed-7" in keys and "mcse/seed-3" in keys
    assert len(set(keys)) == len(keys)
    assert [t.key for t in expand(_grid())] == keys
    again = pickle.loads(pickle.dumps(trials))  # Ray ships trials to workers
    assert again == trials and [t.key for t in again] == keys


def test_overrides_are_read_only():
    g = _grid()
    with pytest.raises(TypeError):
        g.cells[0].overrides["lr"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        expand(g)[0].overrides.update(seed=9)  # type: ignore[attr-defined]


# --- validation ----------------------------------------------------------------------------
def test_validate_builds_demo_configs():
    validate_grid(_grid())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"baseline": "SimCSE"}, "baseline 'SimCSE' is not a cell"),
        ({"seeds": ()}, "non-empty"),
        ({"seeds": (1, 1)}, "distinct"),
        ({"cells": (Cell("MCSE", M), Cell("MCSE", M))}, "duplicate cell names"),
        ({"cells": (Cell("MCSE", M), Cell("a b", M), Cell("A-b", M))}, "collide"),
        ({"cells": (Cell("MCSE", M), Cell("X", {"lr": 1e-5}))}, "objective.method"),
        ({"cells": (Cell("MCSE", M, {"STS-B": 79.5}),)}, "published"),
        ({"cells": (Cell("MCSE", M, {"avg": float("nan")}),)}, "published"),
        ({"plot": "pie"}, "plot"),
        ({"plot": "sweep", "xlabel": "m"}, "sweep"),
    ],
)
def test_validate_rejects(change, message):
    with pytest.raises(ValueError, match=message):
        validate_grid(_grid(**change), build=_no_build)


def test_validate_names_cell_with_bad_override():
    g = _grid(cells=(Cell("MCSE", M), Cell("typo", {**M, "objective.lamda": 0.1})))
    with pytest.raises(ValueError, match=r"cell 'typo'.*objective.lamda"):
        validate_grid(g)


def test_validate_sweep_needs_x_except_on_baseline():
    cells = (Cell("MCSE", M), Cell("m=0.1", M, x=0.1), Cell("m=0.2", M, x=0.2))
    validate_grid(_grid(cells=cells, plot="sweep", xlabel="m"), build=_no_build)
    with pytest.raises(ValueError, match="sweep"):
        validate_grid(_grid(cells=(*cells, Cell("m=?", M)), plot="sweep", xlabel="m"), build=_no_build)


def test_validate_teacher_count_matches_weights():
    bad = Cell("two", {"objective.method": "dalr", "text_teachers": ["minilm-l6"],
                       "objective.teacher_weights": [0.5, 0.5]})
    with pytest.raises(ValueError, match="1 text_teachers but 2"):
        validate_grid(_grid(cells=(Cell("MCSE", M), bad)))


# --- ranges and choices --------------------------------------------------------------------
def test_bad_ranges_raise_at_definition():
    with pytest.raises(ValueError, match=r"lam.*low=0.5 > high=0.1"):
        check_range("lam", 0.5, 0.1)
    with pytest.raises(ValueError, match="log-scale"):
        FloatRange("objective.lam", 0.0, 1.0, log=True)
    with pytest.raises(ValueError, match="finite"):
        FloatRange("m", 0.0, float("inf"))
    with pytest.raises(ValueError, match="low=0.3 > high=0.2"):
        FloatRange("m", 0.3, 0.2)
    check_range("m", 0.2, 0.2)  # a single point is a valid range


def test_choices_must_be_primitives():
    with pytest.raises(ValueError, match="encode as strings"):
        check_choices("teachers", [("simcse", "diffcse"), "simcse"])
    with pytest.raises(ValueError, match="distinct"):
        check_choices("x", ["a", "a"])
    assert check_choices("t", ["off", 0.8, None]) == ("off", 0.8, None)


# --- param decoding ------------------------------------------------------------------------
LAM = FloatRange("objective.lam", 1e-3, 1e-1, log=True)


def _define(trial):
    LAM.suggest(trial)
    trial.suggest_categorical("objective.threshold", ["off", 0.8])
    m = trial.suggest_float("margin", 0.05, 0.3)
    return {"objective.text_margin": m, "objective.grounding_margin": m}


TOY = SearchSpace("toy", "toy search", {"objective.method": "kdmcse"}, _define, M)


def test_params_to_overrides_round_trip():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    from trainables.profiles import build_config

    seen_off = seen_on = False
    for _ in range(12):
        t = study.ask()
        _define(t)
        ov = params_to_overrides(TOY, t.params)
        cfg = build_config("demo", overrides=ov)
        o = cfg.objective
        assert o.method == "kdmcse"
        assert o.lam == t.params["objective.lam"]
        assert o.text_margin == o.grounding_margin == t.params["margin"]
        if t.params["objective.threshold"] == "off":
            seen_off = True
            assert o.threshold is None
        else:
            seen_on = True
            assert o.threshold == 0.8
        assert "margin" not in ov  # encoded params never reach RunConfig
    assert seen_off and seen_on


def test_params_to_overrides_accepts_tune_config_with_derived_keys():
    params = {"objective.lam": 0.01, "objective.threshold": 0.8, "margin": 0.2}
    tune_config = {**params, "objective.text_margin": 0.2, "objective.grounding_margin": 0.2}
    assert params_to_overrides(TOY, tune_config) == params_to_overrides(TOY, params)
    with pytest.raises(ValueError, match="contradicts"):
        params_to_overrides(TOY, {**params, "objective.text_margin": 0.1})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"objective.lam": 0.01, "objective.threshold": 0.8, "margin": 0.2, "lr": 1.0}, "'lr' is not in"),
        ({"objective.lam": 5.0, "objective.threshold": 0.8, "margin": 0.2}, "out of the range"),
        ({"objective.lam": 0.01, "margin": 0.2}, "do not fit"),
    ],
)
def test_params_to_overrides_rejects(params, message):
    with pytest.raises(ValueError, match=message):
        params_to_overrides(TOY, params)


def test_validate_space_catches_a_bad_key():
    def define(trial):
        trial.suggest_float("objective.lamda", 0.0, 1.0)

    validate_space(TOY)
    with pytest.raises(ValueError, match="objective.lamda"):
        validate_space(SearchSpace("bad", "bad", {"objective.method": "mcse"}, define, M))


# --- teachers ------------------------------------------------------------------------------
def test_teacher_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    ov = teacher_overrides("simcse+rankcse", alpha=0.4)
    assert ov["text_teachers"] == [str(tmp_path / "teachers" / "unsup-simcse-bert-base-uncased"),
                                   str(tmp_path / "teachers" / "RankCSE-listmle-bert-base-uncased")]
    assert ov["objective.teacher_weights"] == pytest.approx([0.4, 0.6])
    assert teacher_overrides("clip")["objective.teacher_weights"] == [1.0]
    assert teacher_overrides("simcse+diffcse", demo=True)["text_teachers"] == ["minilm-l6", "minilm-l6"]
    for bad in ("bert", "simcse+diffcse+rankcse", "simcse+"):
        with pytest.raises(ValueError, match="teacher combination"):
            teacher_overrides(bad)
    with pytest.raises(ValueError, match="teacher_alpha"):
        teacher_overrides("simcse+diffcse", alpha=1.0)


def test_default_teacher_pair_equals_the_paper_profile(monkeypatch, tmp_path):
    # The default combination must hash the same whether a grid states it or inherits it.
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    from trainables.profiles import build_config, profile_overrides

    _, prof = profile_overrides("paper")
    assert teacher_overrides("simcse+diffcse")["text_teachers"] == prof["text_teachers"]
    a = build_config("paper", overrides={"objective.method": "dalr"})
    b = build_config("paper", overrides={"objective.method": "dalr", **teacher_overrides("simcse+diffcse")})
    assert a.config_hash() == b.config_hash()


# --- registry ------------------------------------------------------------------------------
def test_unknown_grid_lists_the_known_ones():
    names = [n for n, _ in list_grids()]
    with pytest.raises(ValueError) as e:
        load_grid("table99")
    assert "unknown grid 'table99'" in str(e.value)
    assert all(n in str(e.value) for n in names)
    search = list_spaces()[0][0]
    with pytest.raises(ValueError, match="is a search"):
        load_grid(search)
    with pytest.raises(ValueError, match="unknown search"):
        load_space("nope")


def test_list_text_one_line_per_entry():
    lines = list_text().splitlines()
    grids, spaces = [n for n, _ in list_grids()], [n for n, _ in list_spaces()]
    assert len(lines) == len(grids) + len(spaces)
    for n in grids:
        assert sum(line.split()[:2] == ["grid", n] for line in lines) == 1
    for n in spaces:
        assert sum(line.split()[:2] == ["search", n] for line in lines) == 1


def test_helper_modules_are_not_entries():
    pkg = Path(__file__).resolve().parents[2] / "search_spaces"
    helpers = {p.stem for p in pkg.glob("_*.py")}
    listed = {n for n, _ in list_grids()} | {n for n, _ in list_spaces()}
    assert helpers and not helpers & listed
