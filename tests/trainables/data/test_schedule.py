"""Batch schedule: official alternation counts, loader semantics, proportional mode, resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from trainables.data.schedule import BatchSchedule, ScheduleError, count_steps

WIKI = 1_000_000


@pytest.mark.parametrize(
    "n_pair, bs, epochs, expect",
    [
        # docs/official-code.md §4.3 (MCSE, bs 64): paired_sample_step, steps/epoch, pair steps/epoch, total
        (29_783, 64, 3, (15_625, 466, 33, 16_091, 488, 48_273)),
        (82_783, 64, 3, (15_625, 1_294, 12, 16_919, 1_410, 50_757)),
        # docs/official-code.md §5.5 (KDMCSE, bs 64; 158,915 Flickr / 414,113 COCO captions)
        (158_915, 64, 3, (15_625, 2_484, 6, 18_109, None, 54_327)),
        (414_113, 64, 3, (15_625, 6_471, 2, 22_096, None, 66_288)),
        # docs/official-code.md §6.4 (DALR, bs 128)
        (158_915, 128, 4, (7_813, None, 6, 9_055, None, 36_220)),
        (414_113, 128, 3, (7_813, None, 2, 11_049, None, 33_147)),
    ],
)
def test_official_counts_match_methods_tables(n_pair, bs, epochs, expect):
    c = count_steps(WIKI, n_pair, bs, epochs)
    got = (c.text_batches, c.pair_batches, c.paired_sample_step, c.steps_per_epoch,
           c.pair_steps_per_epoch, c.total_steps)
    for g, e in zip(got, expect, strict=True):
        if e is not None:
            assert g == e


def test_wiki_flickr_epoch_kinds_without_indices():
    s = BatchSchedule(WIKI, 29_783, 64, epochs=3)
    kinds = [s.kind_at(i) for i in range(s.steps_per_epoch)]
    assert kinds.count("pair") == 488 and kinds[0] == "pair"
    assert [i for i, k in enumerate(kinds) if k == "pair"] == list(range(0, 16_091, 33))
    assert s.total_steps == 48_273


def _reference_official(n_text, n_pair, bs, epochs):
    """The official loop, written out plainly: (epoch, step, kind) triples."""
    t, p = math.ceil(n_text / bs), math.ceil(n_pair / bs)
    pss = t // p
    return [(e, s, "pair" if s % pss == 0 else "text") for e in range(epochs) for s in range(t + p)]


@pytest.mark.parametrize("n_text, n_pair, bs", [(100, 9, 4), (37, 10, 5), (64, 64, 64), (10, 3, 3)])
def test_official_sequence_and_loader_semantics(n_text, n_pair, bs):
    epochs = 3
    steps = list(BatchSchedule(n_text, n_pair, bs, epochs=epochs, seed=7))
    assert [(s.epoch, s.step, s.kind) for s in steps] == _reference_official(n_text, n_pair, bs, epochs)
    assert [s.global_step for s in steps] == list(range(len(steps)))
    for kind, n in (("text", n_text), ("pair", n_pair)):
        stream = [s.indices for s in steps if s.kind == kind]
        if not stream:  # (64, 64, 64): paired_sample_step 1, every step is a pair step
            assert kind == "text" and n_text == n_pair
            continue
        # drop_last=False: full batches then one short one per pass; every pass a permutation
        passes, cur = [], []
        for b in stream:
            assert 1 <= len(b) <= bs
            cur.append(b)
            if sum(map(len, cur)) == n:
                passes.append(np.concatenate(cur))
                cur = []
        assert sum(map(len, cur)) < n  # the loader stream carries over epochs: a partial pass left
        assert passes, "at least one full pass expected"
        for perm in passes:
            assert sorted(perm.tolist()) == list(range(n))
        if len(passes) > 1:
            assert not np.array_equal(passes[0], passes[1])  # reshuffled every pass


def test_official_refuses_more_pair_than_text_batches():
    with pytest.raises(ScheduleError, match="schedule=proportional"):
        count_steps(100, 200, 10)
    with pytest.raises(ScheduleError, match="schedule=proportional"):
        BatchSchedule(100, 200, 10)


@pytest.mark.parametrize("n_text, n_pair, bs", [(100, 9, 4), (20, 90, 10), (50, 50, 10), (33, 7, 5)])
def test_proportional_exact_counts_even_spread_exact_passes(n_text, n_pair, bs):
    t, p = math.ceil(n_text / bs), math.ceil(n_pair / bs)
    s = BatchSchedule(n_text, n_pair, bs, epochs=2, seed=1, mode="proportional")
    steps = list(s)
    assert len(steps) == 2 * (t + p)
    for e in range(2):
        ep = [x for x in steps if x.epoch == e]
        pair_pos = [x.step for x in ep if x.kind == "pair"]
        assert len(pair_pos) == p and pair_pos[0] == 0
        gaps = np.diff(pair_pos + [t + p])  # as even as integers allow
        assert gaps.max() - gaps.min() <= 1
        for kind, n in (("text", n_text), ("pair", n_pair)):  # each epoch = one pass of each
            idx = np.concatenate([x.indices for x in ep if x.kind == kind])
            assert sorted(idx.tolist()) == list(range(n))


def test_text_only_and_pair_only():
    s = BatchSchedule(10, 0, 4, epochs=2, seed=0)
    steps = list(s)
    assert [x.kind for x in steps] == ["text"] * 6 and [len(x.indices) for x in steps] == [4, 4, 2] * 2
    assert [x.step for x in steps] == [0, 1, 2, 0, 1, 2]
    p = BatchSchedule(0, 7, 3, epochs=1)
    assert [x.kind for x in p] == ["pair"] * 3


def test_text_order_does_not_depend_on_pair_data():
    with_pairs = [x.indices for x in BatchSchedule(40, 4, 4, epochs=1, seed=3) if x.kind == "text"]
    alone = [x.indices for x in BatchSchedule(40, 0, 4, epochs=1, seed=3)]
    for a, b in zip(with_pairs, alone, strict=False):
        np.testing.assert_array_equal(a, b)


def test_seed_changes_order():
    a = next(iter(BatchSchedule(100, 10, 8, seed=0))).indices
    b = next(iter(BatchSchedule(100, 10, 8, seed=1))).indices
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("mode", ["official", "proportional"])
def test_resume_mid_epoch_yields_identical_remaining_sequence(mode):
    args = dict(n_text=23, n_pair=9, batch_size=4, epochs=3, seed=11, mode=mode)
    full = [(x.epoch, x.step, x.global_step, x.kind, x.indices.tolist()) for x in BatchSchedule(**args)]
    spe = BatchSchedule(**args).steps_per_epoch
    for k in (0, 1, 2, 5, spe - 1, spe, spe + 1, 2 * spe + 3, len(full) - 1, len(full)):
        first = BatchSchedule(**args)
        for _ in range(k):
            next(first)
        state = json.loads(json.dumps(first.state_dict()))  # must survive a JSON checkpoint
        fresh = BatchSchedule(**args)
        fresh.load_state_dict(state)
        assert len(fresh) == len(full) - k
        rest = [(x.epoch, x.step, x.global_step, x.kind, x.indices.tolist()) for x in fresh]
        assert rest == full[k:], f"resume after {k} steps diverged"


def test_resume_refuses_other_config():
    state = BatchSchedule(20, 5, 4).state_dict()
    with pytest.raises(ScheduleError, match="same data"):
        BatchSchedule(21, 5, 4).load_state_dict(state)


def test_max_steps_overrides_epochs():
    s = BatchSchedule(20, 4, 4, epochs=1, max_steps=9)  # steps_per_epoch = 6
    steps = list(s)
    assert len(steps) == 9 and steps[-1].epoch == 1 and steps[-1].step == 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_text=0, n_pair=0, batch_size=4), "no training data"),
        (dict(n_text=-1, n_pair=3, batch_size=4), "negative"),
        (dict(n_text=10, n_pair=3, batch_size=0), "batch_size=0"),
        (dict(n_text=10, n_pair=3, batch_size=4, mode="random"), "mode='random'"),
        (dict(n_text=10, n_pair=3, batch_size=4, max_steps=0), "max_steps=0"),
    ],
)
def test_bad_configs(kwargs, message):
    with pytest.raises(ScheduleError, match=message):
        BatchSchedule(**kwargs)


def test_max_steps_is_the_official_max_train_steps():
    """Above epochs x steps_per_epoch a step budget adds epochs (not capped); below, it cuts."""
    from trainables.data.schedule import run_length

    c = count_steps(96, 32, 8, epochs=2)  # 16 steps an epoch, 32 in all
    assert run_length(c, None) == (32, 2)
    assert run_length(c, 50) == (50, 4)  # ceil(50 / 16) epochs, the last one cut short
    assert run_length(c, 20) == (20, 2)
    s = BatchSchedule(96, 32, 8, epochs=2, seed=0, max_steps=50)
    steps = list(s)
    assert len(steps) == 50 and steps[-1].epoch == 3 and steps[-1].step == 1
    assert [st.kind for st in steps[32:48]] == [st.kind for st in steps[:16]]  # epoch 3 as epoch 1
