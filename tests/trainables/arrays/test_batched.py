"""Members of one method as one batched computation (trainables/arrays/batched.py): a member in a
batched group of three trains as it does alone (every loss term at every step, and its weights,
within 1e-6 in fp32 on the CPU), for MCSE, KDMCSE and DALR, with the group's members differing in
seed and in numeric settings; a NaN in one member of a group drops only it; a method whose loss
vmap cannot run falls back to the per-member loop, says so once, and trains the same."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from tests.trainables.arrays.harness import cfg
from trainables.arrays import batched
from trainables.arrays.trainer import ArrayTrainer
from trainables.objectives.methods import Method, Needs, Settings, register, text_infonce
from trainables.runtime.checks import POSITIVE, setting

TIGHT = 1e-6
STEPS = 4  # caption and text batches both (the demo schedule starts with a caption batch)


@pytest.fixture
def group_sizes(monkeypatch):
    """The size of every group that ran batched, per step."""
    sizes: list[int] = []
    real = batched.MethodGroups._batched

    def counting(self, js, *a, **kw):
        out = real(self, js, *a, **kw)
        if out is not None:
            sizes.append(len(js))
        return out

    monkeypatch.setattr(batched.MethodGroups, "_batched", counting)
    return sizes


def train(members, steps=STEPS):
    """-> (trainer, {key: [terms of each step]}): ``steps`` steps straight through train_step."""
    t = ArrayTrainer(members)
    t.model.train()
    seen: dict[str, list[dict[str, float]]] = {k: [] for k, _ in members}
    for _ in range(steps):
        for k, terms in t.train_step().items():
            seen[k].append({n: float(v) for n, v in terms.items()})
    return t, seen


def assert_same(a, key_a, b, key_b, tol=TIGHT):
    (ta, sa), (tb, sb) = a, b
    assert len(sa[key_a]) == len(sb[key_b]) == STEPS
    for step, (x, y) in enumerate(zip(sa[key_a], sb[key_b], strict=True)):
        assert set(x) == set(y)
        for n in x:
            assert y[n] == pytest.approx(x[n], abs=tol, rel=tol), (n, step)
    ja = [m.key for m in ta.alive].index(key_a)
    jb = [m.key for m in tb.alive].index(key_b)
    wa, wb = ta.model.member_state(ja), tb.model.member_state(jb)
    for part in wa:
        for name, v in wa[part].items():
            assert torch.allclose(wb[part][name].float(), v.float(), atol=tol, rtol=0), (part, name)


# Numeric settings the group's members differ on (tensors with a member axis in the group).
OWN = {"mcse": {"objective.lam": 0.3, "objective.temperature_vl": 0.07},
       "kdmcse": {"objective.lam": 0.3, "objective.grounding_margin": 0.1},
       "dalr": {"objective.mu": 0.3, "objective.text_margin": 0.1}}


@pytest.mark.parametrize("method", ["mcse", "kdmcse", "dalr"])
def test_member_of_a_batched_group_of_three_trains_as_alone(method, tiny_bert, cache, group_sizes):
    me = cfg(tiny_bert, cache, method, seed=3, max_steps=STEPS, final_eval=False, **OWN[method])
    alone = train([("me", me)])
    assert group_sizes == [1] * STEPS  # alone, it runs the same batched computation
    group_sizes.clear()
    group = train([("a", cfg(tiny_bert, cache, method, seed=0, max_steps=STEPS, final_eval=False)),
                   ("me", me),
                   ("b", cfg(tiny_bert, cache, method, seed=5, max_steps=STEPS, final_eval=False))])
    assert group_sizes == [3] * STEPS and group[0].objectives.looped == {}
    assert_same(alone, "me", group, "me")
    # not vacuous: the members differ
    totals = {k: group[1][k][-1]["total"] for k in ("a", "me", "b")}
    assert len(set(totals.values())) == 3


def test_nan_in_one_member_of_a_batched_group_drops_only_it(tiny_bert, cache, monkeypatch,
                                                           group_sizes):
    real = batched.compute_objective

    def poisoned(s, out, teacher, generator=None):  # under vmap: no branching on the tensor lam
        terms = real(s, out, teacher, generator=generator)
        if teacher is not None:
            bad = s.lam < 0.5  # a tensor in the group (lam differs; the demo has 1.0), a bool alone
            bad = bad if isinstance(bad, torch.Tensor) else torch.tensor(bad)
            terms["grounding_image"] = torch.where(bad, float("nan"), terms["grounding_image"])
            terms["total"] = terms["total"] + terms["grounding_image"] * 0
        return terms

    good = cfg(tiny_bert, cache, "kdmcse", seed=1, max_steps=STEPS, final_eval=False)
    alone = train([("good", good)])
    group_sizes.clear()
    monkeypatch.setattr(batched, "compute_objective", poisoned)
    t, seen = train([("bad", cfg(tiny_bert, cache, "kdmcse", seed=0, max_steps=STEPS,
                                 final_eval=False, **{"objective.lam": 0.3})),
                     ("good", good),
                     ("other", cfg(tiny_bert, cache, "kdmcse", seed=2, max_steps=STEPS,
                                   final_eval=False))])
    assert group_sizes[0] == 3 and group_sizes[1:] == [2] * (STEPS - 1)
    assert [m.key for m in t.alive] == ["good", "other"]
    assert t.members[0].record.error.startswith(
        "non-finite loss at step 1: term 'grounding_image' is nan")
    assert_same(alone, "good", (t, seen), "good")


@dataclass(frozen=True)
class HostReadSettings(Settings):
    temperature: float = setting(0.05, POSITIVE)


@register
class HostRead(Method):
    """SimCSE's text term, but it reads a value back to the host (vmap cannot run that)."""

    name = "hostread"
    settings = HostReadSettings

    def needs(self, s: HostReadSettings) -> Needs:
        return Needs(captions=False, image=False)

    def text_loss(self, s, out):
        text = text_infonce(out, s.temperature)
        scale = 1.0 if float(text.detach()) < 1e9 else 0.5  # a host read: vmap refuses it
        return {"text": text, "total": scale * text}


def test_a_method_vmap_cannot_run_falls_back_to_the_loop_once(tiny_bert, cache, capsys,
                                                              group_sizes):
    me = cfg(tiny_bert, cache, "hostread", seed=3, max_steps=STEPS, final_eval=False)
    alone = train([("me", me)])
    capsys.readouterr()
    t, seen = train([("a", cfg(tiny_bert, cache, "hostread", seed=0, max_steps=STEPS,
                               final_eval=False)), ("me", me)])
    assert group_sizes == [] and set(t.objectives.looped) == {"hostread"}
    said = [ln for ln in capsys.readouterr().out.splitlines() if "one by one" in ln]
    assert len(said) == 1 and "'hostread'" in said[0]
    assert_same(alone, "me", (t, seen), "me")


def test_the_step_reads_nothing_back_but_the_finite_check(tiny_bert, cache, monkeypatch):
    """Dropout's per-member extents come from the batches' shapes (equal to what the mask says),
    the teachers take a mask built ahead: within a step the host reads back only the finite check
    (its one ``tolist``, ``finite_check.py``)."""
    from trainables.arrays import dropout
    from trainables.arrays.array_model import ArrayModel

    real_extents, real_cls = dropout.member_extents, ArrayModel.cls
    seen, quiet = [], []

    def cls(self, ids, mask, generators=None, extents=None):
        if generators is not None:  # the read-back the step no longer does, for comparison
            quiet.append(True)
            seen.append((tuple(map(tuple, extents)), tuple(map(tuple, real_extents(mask)))))
            quiet.clear()
        return real_cls(self, ids, mask, generators, extents)

    def no_read_back(*a, **kw):
        raise AssertionError("the step read the members' extents back from the device")

    reads = []
    real_tolist = torch.Tensor.tolist

    def counting_tolist(self):
        if not quiet:
            reads.append(tuple(self.shape))
        return real_tolist(self)

    monkeypatch.setattr(ArrayModel, "cls", cls)
    monkeypatch.setattr(dropout, "member_extents", no_read_back)
    t = ArrayTrainer([(m, cfg(tiny_bert, cache, m, seed=i, max_steps=STEPS, final_eval=False))
                      for i, m in enumerate(("mcse", "dalr", "kdmcse"))])
    t.model.train()
    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist)
    for _ in range(STEPS):
        t.train_step()
    assert len(seen) == STEPS and all(mine == read for mine, read in seen)
    assert len(reads) == STEPS  # the finite check: the flags, the filter shares and the values, one sync


@pytest.fixture(scope="module")
def image_only_store(cache):
    """The demo's caption store without its CLIP caption feature: what MCSE's own ResNet store
    (``flickr30k_mcse_resnet50.parquet``, an 'image' column only) gives the paper profile."""
    import dataclasses

    import numpy as np

    from trainables.data.demo_corpus import generate_demo
    from trainables.data.store import FeatureStore, write_store

    demo = generate_demo(cache / "demo", seed=0, dim=32)
    store = FeatureStore(demo.pairs_store)
    rows = store.batch(np.arange(len(store)))
    path = cache / "image_only.parquet"
    meta = dataclasses.replace(store.metadata, text_teacher=None, text_dim=None)
    write_store(path, rows["caption"], rows["image_id"], {"image": rows["image"]}, meta)
    assert FeatureStore(path).feature_columns == ("image",)
    return {"data.demo": False, "data.pairs": str(path), "data.text": str(demo.text_file),
            "data.senteval": str(demo.senteval_dir)}


# KDMCSE reads the CLIP text for its L_t term: without it, the term is off (MCSE's grounding
# with AdapACSE margins), as a KDMCSE cell on MCSE's store would have to be configured.
NO_CLIP_TEXT = {"mcse": {}, "kdmcse": {"objective.clip_text_term": False}, "dalr": {}}


@pytest.mark.parametrize("store", ["with caption features", "without"])
def test_every_method_runs_batched_on_every_store(store, tiny_bert, cache, image_only_store,
                                                  group_sizes, capsys):
    """MCSE, KDMCSE and DALR arrays on a store with CLIP caption features and on one with the
    image feature only: no method falls back to the per-member loop (an absent input is left
    out of the vmapped inputs, not passed as None)."""
    over = image_only_store if store == "without" else {}
    members = [(f"{m}{i}", cfg(tiny_bert, cache, m, seed=i, max_steps=STEPS, final_eval=False,
                               **over, **(NO_CLIP_TEXT[m] if over else {})))
               for m in ("mcse", "kdmcse", "dalr") for i in range(2)]
    t, seen = train(members)
    assert t.objectives.looped == {}
    assert "one by one" not in capsys.readouterr().out
    assert group_sizes == [2] * (3 * STEPS)  # every method's two members, every step
    kinds = {m.data.pairs.feature_columns for m in t.members}
    assert kinds == ({("image",)} if over else {("image", "clip_text")})
    assert all(len(v) == STEPS for v in seen.values())


def test_batched_equals_the_per_member_loop_without_caption_features(tiny_bert, cache,
                                                                    image_only_store):
    """The batched MCSE group on the image-only store computes what its members compute one by
    one (the per-member loop, forced): every loss term and weight within 1e-6."""
    members = [(f"m{i}", cfg(tiny_bert, cache, "mcse", seed=i, max_steps=STEPS, final_eval=False,
                             **image_only_store, **{"objective.lam": 0.3 + 0.2 * i}))
               for i in range(2)]
    grouped = train(members)
    assert grouped[0].objectives.looped == {}
    t = ArrayTrainer(members)
    t.objectives.looped["mcse"] = "forced by the test"  # the per-member loop
    t.model.train()
    seen = {k: [] for k, _ in members}
    for _ in range(STEPS):
        for k, terms in t.train_step().items():
            seen[k].append({n: float(v) for n, v in terms.items()})
    for key in ("m0", "m1"):
        assert_same(grouped, key, (t, seen), key)


def test_one_by_one_trains_a_member_as_batched_does(tiny_bert, cache, monkeypatch, capsys):
    """docs/methods.md: falling back to the per-member loop changes the speed, not the numbers.
    Two MCSE members (differing in lam, so it reaches the batched loss as a tensor), batched,
    then with vmap refused: every term at every step and the weights agree."""
    members = [("a", cfg(tiny_bert, cache, "mcse", seed=0, max_steps=STEPS, final_eval=False)),
               ("b", cfg(tiny_bert, cache, "mcse", seed=4, max_steps=STEPS, final_eval=False,
                         **{"objective.lam": 0.3}))]
    batched_run = train(members)
    assert batched_run[0].objectives.looped == {}

    def refuse(*a, **k):
        raise RuntimeError("vmap: refused by the test")

    monkeypatch.setattr(batched, "vmapped_terms", refuse)
    looped_run = train(members)
    assert looped_run[0].objectives.looped["mcse"].startswith(
        "RuntimeError: vmap: refused by the test (at test_batched.py line ")  # the line at fault
    for key in ("a", "b"):
        assert_same(batched_run, key, looped_run, key)
    assert "method 'mcse': one by one: RuntimeError: vmap: refused by the test" in \
        capsys.readouterr().out
