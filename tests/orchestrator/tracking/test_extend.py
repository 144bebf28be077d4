"""``--resume`` of a grid whose subset ran first (``--cells``, fewer ``--seeds``, fewer
calibration runs): the subset's parent is extended, its finished runs reused; anything that is
not a subset of the new plan (another cell set, another config) is left alone."""

from __future__ import annotations

import pytest

from orchestrator.tracking.client import TAG, Tracker


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    """One store for the module (a new one costs seconds); each test has its own grid name."""
    return Tracker(f"sqlite:///{tmp_path_factory.mktemp('extend') / 'mlflow.db'}")


def table(tracker, plan_id, runs, grid="kdmcse_table3", kind="table"):
    """A parent of ``kind`` with one FINISHED child per (key, config hash) in ``runs``."""
    parent = tracker.start_parent(grid, kind, plan_id, {f"{TAG}grid": grid})
    for key, h in runs.items():
        cell, seed = key.split("/seed-")
        child = tracker.start_child(parent, {"key": key, "grid": grid, "cell": cell, "seed": seed,
                                             "config_hash": h, "run_name": key, "run": {}})
        tracker.end(child)
    tracker.end(parent)
    return parent


SUBSET = {"mcse/seed-0": "m0", "mcse/seed-1": "m1", "kdmcse/seed-0": "k0", "kdmcse/seed-1": "k1"}
GRID = {**SUBSET, "wo-ada/seed-0": "a0", "wo-ada/seed-1": "a1"}


def test_the_whole_grid_extends_the_parent_of_its_cells(tracker):
    sub = table(tracker, "cells-1", SUBSET, grid="g1")
    assert tracker.parent_to_extend("table", "g1", "whole-1", GRID) == sub
    run = tracker.client.get_run(sub)  # finding it writes nothing: the session reopens it,
    assert run.data.tags[f"{TAG}plan_id"] == "cells-1"  # under the driver lock
    assert run.info.status == "FINISHED"
    assert set(tracker.finished_runs(sub)) == set(SUBSET)


@pytest.mark.parametrize("n,plan", [
    (2, {**GRID, "kdmcse/seed-1": "other"}),  # a run of the subset changed its config
    (3, {k: v for k, v in GRID.items() if k != "mcse/seed-1"}),  # the subset is not inside it
])
def test_a_parent_that_is_not_a_subset_is_left_alone(tracker, n, plan):
    sub = table(tracker, f"cells-{n}", SUBSET, grid=f"g{n}")
    assert tracker.parent_to_extend("table", f"g{n}", f"whole-{n}", plan) is None
    assert tracker.client.get_run(sub).data.tags[f"{TAG}plan_id"] == f"cells-{n}"


def test_a_plan_with_its_own_parent_or_another_grid_extends_nothing(tracker):
    table(tracker, "cells-4", SUBSET, grid="g4")
    table(tracker, "whole-4", GRID, grid="g4")
    assert tracker.parent_to_extend("table", "g4", "whole-4", GRID) is None
    assert tracker.parent_to_extend("table", "g5", "new-5", GRID) is None
    assert tracker.parent_to_extend("calibration", "g4", "new-4", GRID) is None
