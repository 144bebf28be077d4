"""The grid language: cells x seeds expansion, stable trial keys, read-only overrides that pickle."""

from __future__ import annotations

import pickle

import pytest

from orchestrator.spec.grids import (
    STS_COLUMNS,
    Cell,
    Grid,
    RunSpec,
    check_seeds,
    expand,
    frozen_mapping,
    slug,
)

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


# --- expansion -----------------------------------------------------------------------------
def test_expand_cells_times_seeds_baseline_first_same_seeds():
    trials = expand(_grid())
    assert len(trials) == 3 * 2 and all(isinstance(t, RunSpec) for t in trials)
    assert [(t.cell, t.seed) for t in trials[:2]] == [("MCSE", 3), ("MCSE", 7)]
    by_cell: dict[str, list[int]] = {}
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
    with pytest.raises(ValueError, match="needs at least 1 seed"):
        expand(_grid(), seeds=[])
    with pytest.raises(ValueError, match="non-negative"):
        expand(_grid(), seeds=[-1, 0])
    with pytest.raises(ValueError, match="integers"):
        expand(_grid(), seeds=[1.5])  # type: ignore[list-item]


def test_check_seeds_names_what_it_checks():
    assert check_seeds((0, 1, 2), "grid 'x': seeds") == "seeds 0 1 2: 3 distinct, non-negative"
    with pytest.raises(ValueError, match=r"^grid 'x': seeds 0 0: seeds must be distinct"):
        check_seeds((0, 0), "grid 'x': seeds")
    with pytest.raises(ValueError, match=r"^--seeds 3: needs at least 2 seeds .*trainables.train"):
        check_seeds((3,), "--seeds", least=2)
    with pytest.raises(ValueError, match="non-negative integers"):
        check_seeds((True, 1), "--seeds")


def test_trial_keys_stable_unique_and_picklable():
    trials = expand(_grid())
    keys = [t.key for t in trials]
    assert "w-o-adapacse/seed-7" in keys and "mcse/seed-3" in keys
    assert len(set(keys)) == len(keys)
    assert [t.key for t in expand(_grid())] == keys
    again = pickle.loads(pickle.dumps(trials))  # Ray ships trials to workers
    assert again == trials and [t.key for t in again] == keys


@pytest.mark.parametrize(("name", "expected"), [
    ("w/o AdapACSE", "w-o-adapacse"), ("m=0.125", "m-0.125"), ("MCSE", "mcse"),
    ("without threshold filtering", "without-threshold-filtering"), ("CLIP+SimCSE+DiffCSE", "clip-simcse-diffcse"),
    ("...", "cell"), ("-a-", "a"),
])
def test_slug_is_file_and_url_safe(name, expected):
    assert slug(name) == expected


# --- immutability --------------------------------------------------------------------------
def test_overrides_are_read_only():
    g = _grid()
    with pytest.raises(TypeError, match="read-only"):
        g.cells[0].overrides["lr"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        expand(g)[0].overrides.update(seed=9)  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        g.base.pop("lr")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        g.cells[1].published["avg"] = 0.0  # type: ignore[index]


def test_frozen_mapping_copies_refuses_writes_and_pickles_read_only():
    src = {"lr": 1e-5}
    f = frozen_mapping(src)
    src["lr"] = 9.0  # the frozen copy does not follow its source
    assert dict(f) == {"lr": 1e-5}
    again = pickle.loads(pickle.dumps(f))
    assert dict(again) == {"lr": 1e-5}
    for write in (lambda m: m.__setitem__("x", 1), lambda m: m.__delitem__("lr"), lambda m: m.clear(),
                  lambda m: m.setdefault("x", 1), lambda m: m.popitem()):
        with pytest.raises(TypeError):
            write(again)


def test_grid_stores_tuples_even_from_lists():
    g = _grid(cells=[Cell("MCSE", M)], seeds=[1, 2])
    assert g.cells == (Cell("MCSE", M),) and g.seeds == (1, 2)


# --- lookup --------------------------------------------------------------------------------
def test_cell_lookup_and_published_shape():
    g = _grid()
    assert g.cell("KDMCSE").overrides["lr"] == 2e-5
    with pytest.raises(ValueError, match=r"no cell 'SimCSE'; cells: \['KDMCSE', 'MCSE', 'w/o AdapACSE'\]"):
        g.cell("SimCSE")
    # only cells with published numbers, as plain dicts (what orchestrator.analysis.tables.analyze takes)
    assert g.published == {"MCSE": {"avg": 77.3}}
    assert type(g.published["MCSE"]) is dict


def test_defaults_are_five_paired_seeds_and_the_sts_columns():
    g = Grid("d", "d", (Cell("MCSE", M),), "MCSE")
    assert g.seeds == (0, 1, 2, 3, 4) and g.plot == "bars"
    assert g.columns == STS_COLUMNS
    assert STS_COLUMNS[-1] == "avg" and len(STS_COLUMNS) == 8  # seven STS tasks, then the average
