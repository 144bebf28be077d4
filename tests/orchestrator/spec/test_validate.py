"""Checks that need no data: every cell of a grid and every draw of a search builds a valid run
config, and the grid's names, baseline, seeds, published numbers and sweep are sane."""

from __future__ import annotations

import warnings

import pytest

from orchestrator.spec.grids import Cell
from orchestrator.spec.spaces import SearchSpace
from orchestrator.spec.validate import validate_grid, validate_space
from tests.orchestrator.spec.test_grids import M, _grid  # the toy grid, defined once
from tests.orchestrator.spec.test_spaces import TOY  # the toy search, defined once


def _no_build(overrides):  # validation logic without RunConfig
    return None


# --- grids ---------------------------------------------------------------------------------
def test_validate_builds_demo_configs_with_base_cell_and_seed():
    seen = []
    validate_grid(_grid(), build=lambda ov: seen.append(dict(ov)))
    assert seen[0] == {"lr": 2e-5, "batch_size": 8, "objective.method": "kdmcse", "seed": 3}
    assert len(seen) == 3
    validate_grid(_grid())  # the real demo build accepts it


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cells": ()}, "has no cells"),
        ({"baseline": "SimCSE"}, "baseline 'SimCSE' is not a cell"),
        ({"seeds": ()}, r"seeds \(none\): needs at least 1 seed"),
        ({"seeds": (-1, 0)}, "non-negative"),
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


def test_a_method_in_the_base_serves_every_cell():
    cells = (Cell("MCSE", {}), Cell("fast", {"lr": 1e-4}))
    validate_grid(_grid(cells=cells, base=M), build=_no_build)


def test_published_keys_must_be_columns_of_the_grid():
    cells = (Cell("MCSE", M, {"alignment": 0.29, "uniformity": -2.49}),)
    validate_grid(_grid(cells=cells, columns=("alignment", "uniformity", "avg")), build=_no_build)
    with pytest.raises(ValueError, match=r"published alignment=0.29"):
        validate_grid(_grid(cells=cells), build=_no_build)  # STS columns only


def test_validate_names_cell_with_bad_override():
    g = _grid(cells=(Cell("MCSE", M), Cell("typo", {**M, "objective.lamda": 0.1})))
    with pytest.raises(ValueError, match=r"grid 'toy' cell 'typo'.*objective.lamda"):
        validate_grid(g)


def test_validate_sweep_needs_x_except_on_baseline():
    cells = (Cell("MCSE", M), Cell("m=0.1", M, x=0.1), Cell("m=0.2", M, x=0.2))
    validate_grid(_grid(cells=cells, plot="sweep", xlabel="m"), build=_no_build)
    with pytest.raises(ValueError, match="sweep"):
        validate_grid(_grid(cells=(*cells, Cell("m=?", M)), plot="sweep", xlabel="m"), build=_no_build)
    with pytest.raises(ValueError, match="sweep"):  # two cells at one x
        validate_grid(_grid(cells=(*cells, Cell("m=.1", M, x=0.1)), plot="sweep", xlabel="m"),
                      build=_no_build)
    with pytest.raises(ValueError, match="sweep"):  # no axis label
        validate_grid(_grid(cells=cells, plot="sweep"), build=_no_build)


def test_validate_teacher_count_matches_weights():
    bad = Cell("two", {"objective.method": "dalr", "text_teachers": ["minilm-l6"],
                       "objective.teacher_weights": [0.5, 0.5]})
    with pytest.raises(ValueError, match="cell 'two': 1 text_teachers but 2"):
        validate_grid(_grid(cells=(Cell("MCSE", M), bad)))


def test_validate_resolves_symbolic_teachers_on_the_demo():
    ok = Cell("pair", {"objective.method": "dalr", "teachers": "simcse+rankcse"})
    validate_grid(_grid(cells=(Cell("MCSE", M), ok)))
    bad = Cell("typo", {"objective.method": "dalr", "teachers": "simcse+rankcs"})
    with pytest.raises(ValueError, match=r"cell 'typo': teacher combination 'simcse\+rankcs'"):
        validate_grid(_grid(cells=(Cell("MCSE", M), bad)))


# --- searches ------------------------------------------------------------------------------


def test_validate_space_catches_a_bad_key():
    def define(trial):
        trial.suggest_float("objective.lamda", 0.0, 1.0)

    validate_space(TOY)
    with pytest.raises(ValueError, match=r"search 'bad' params .*objective.lamda"):
        validate_space(SearchSpace("bad", "bad", {"objective.method": "mcse"}, define, M))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"base": {}}, "must name objective.method"),
        ({"baseline": {"lr": 1e-5}}, "must name objective.method"),
        ({"mode": "best"}, "mode must be min/max"),
        ({"num_samples": 0}, "num_samples"),
        ({"confirm_seeds": (1, 1)}, "distinct"),
        ({"baseline": {**M, "objective.lamda": 1.0}}, "objective.lamda"),
    ],
)
def test_validate_space_rejects(change, message):
    import dataclasses

    with pytest.raises(ValueError, match=message):
        validate_space(dataclasses.replace(TOY, **change))


def test_validate_space_refuses_non_primitive_choices():
    def define(trial):
        trial.suggest_categorical("objective.threshold", [None, 0.8])
        trial.suggest_categorical("pair", [("simcse", "diffcse")])

    with warnings.catch_warnings():  # Optuna itself only warns about such choices
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="encode as strings"):
            validate_space(SearchSpace("tuples", "t", {"objective.method": "kdmcse"}, define, M),
                           samples=1)


def _nested(trial):
    """A teacher choice asked only on one branch, with one unknown teacher among its options."""
    if trial.suggest_categorical("kind", ["two", "one"]) == "two":
        trial.suggest_categorical("teachers", ["simcse+diffcse", "clip", "simcse+bert", "diffcse"])


NESTED = SearchSpace("nested", "nested", {"objective.method": "dalr"}, _nested, M)


def test_exhaustive_finds_a_bad_option_random_draws_miss_even_behind_a_branch():
    # One random draw (RandomSampler(seed=0)) takes the branch without teachers: nothing to see.
    validate_space(NESTED, samples=1)
    # Exhaustive forces every option of every categorical, reaching 'teachers' through the
    # branch that asks it, so the unknown 'bert' is found before the search.
    with pytest.raises(ValueError, match=r"search 'nested' params \{'kind': 'two', 'teachers': "
                                         r"'simcse\+bert'\}: teacher combination 'simcse\+bert'"):
        validate_space(NESTED, samples=1, exhaustive=True)

    def known_only(trial):
        if trial.suggest_categorical("kind", ["two", "one"]) == "two":
            trial.suggest_categorical("teachers", ["simcse+diffcse", "clip"])

    validate_space(SearchSpace("good", "good", {"objective.method": "dalr"}, known_only, M),
                   samples=1, exhaustive=True)


def test_exhaustive_tries_every_option_of_every_categorical():
    asked: list[dict] = []

    def define(trial):
        if trial.suggest_categorical("kind", ["a", "b", "c"]) == "b":
            trial.suggest_categorical("teachers", ["simcse", "clip", "rankcse"])
        asked.append(dict(trial.params))

    validate_space(SearchSpace("all", "all", {"objective.method": "dalr"}, define, M),
                   samples=1, exhaustive=True)
    assert {p["kind"] for p in asked} == {"a", "b", "c"}
    assert {p["teachers"] for p in asked if "teachers" in p} == {"simcse", "clip", "rankcse"}
