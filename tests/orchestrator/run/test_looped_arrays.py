"""A table whose cells train a stacked encoder (BERT) and a looped one (DistilBERT): the pre-start
check names which is which, packing never puts them in one array, and the looped arrays carry
their note to the dry run, the terminal and each member's MLflow record."""

from __future__ import annotations

import pytest

from orchestrator.run.campaign import noted
from orchestrator.run.dry_run import describe
from orchestrator.run.preflight import check_data, check_encoders
from orchestrator.spec.grids import Cell, Grid
from orchestrator.spec.plan import pack, plan_runs
from orchestrator.tracking.mirror import member_record
from trainables.testing import write_tiny_profile


@pytest.fixture(scope="module")
def members(tmp_path_factory, tiny_bert, tiny_distilbert):
    d = tmp_path_factory.mktemp("looped-arrays")
    profile = write_tiny_profile(d, tiny_bert, max_steps=3, eval_every=3)
    grid = Grid("mixed-encoders", "BERT and DistilBERT students",
                (Cell("BERT", {"objective.method": "mcse"}),
                 Cell("DistilBERT", {"objective.method": "mcse", "encoder": str(tiny_distilbert)}),
                 Cell("DistilBERT KD", {"objective.method": "kdmcse",
                                        "encoder": str(tiny_distilbert)})),
                baseline="BERT", seeds=(0, 1))
    return plan_runs(grid, str(profile))


def test_the_check_names_the_looped_encoder_and_packing_keeps_it_apart(members, tiny_distilbert):
    lines = check_encoders(members)
    assert len(lines) == 2
    assert lines[0].endswith("bert, trained as stacked arrays")
    assert lines[1].startswith(f"encoder {tiny_distilbert}: distilbert: not expressible as a stacked array")
    keys = check_data(members).array_keys
    for slots, size in ((1, None), (4, None), (1, 6)):  # even one slot, or room for all six
        arrays = noted(pack(members, keys, "t", "runs", 1.0, 0.0, 1, array_size=size, slots=slots))
        for t in arrays:
            encoders = {m.run.encoder for m in t.members}
            assert len(encoders) == 1, encoders
            assert bool(t.note) == (encoders == {str(tiny_distilbert)})
        assert {m.key for t in arrays for m in t.members} == {m.key for m in members}
    (looped,) = [t for t in noted(pack(members, keys, "t", "runs", 1.0, 0.0, 1, array_size=None,
                                       slots=1)) if t.note]
    assert {m.cell for m in looped.members} == {"DistilBERT", "DistilBERT KD"}  # they share one
    listing = describe(noted(pack(members, keys, "t", "runs", 1.0, 0.0, 1, array_size=2, slots=1)))
    assert listing.count("members train one by one (slower: no shared batched forward)") == 2
    record = member_record(looped.members[0], looped)
    assert record["backend"] == "looped" and record["backend_note"] == looped.note
    stacked = next(t for t in noted(pack(members, keys, "t", "runs", 1.0, 0.0, 1, array_size=None,
                                         slots=1)) if not t.note)
    assert member_record(stacked.members[0], stacked)["backend"] == "stacked"
