"""The array loop without Ray. Member independence: a member trained alone, inside an array of
five and inside a mixed MCSE/KDMCSE/DALR array gives the same losses, dev curve and test scores
(CPU, fp32, within 1e-5); so does a member of a plug-in method with a head of its own
(tests/trainables/plugin_method.py). Also: every method trains, same seed same result, a killed array
resumed from its checkpoint ends exactly like an uninterrupted one, a NaN drops only its member,
successive halving drops whole groups, the best weights are what is evaluated and exported, a
store whose features DALR's CMA cannot use is refused before any model is built.

These replace the single-run loop's tests (trainables/loop.py is gone): an array of one member is
that run."""

from __future__ import annotations

import math

import pytest
import torch

import tests.trainables.plugin_method  # noqa: F401  (registers the plug-in method "auxhead")
from tests.trainables.arrays.harness import (
    TOL,
    Reports,
    assert_same_member,
    cfg,
    kill_and_resume,
    run,
)
from trainables.arrays.trainer import ArrayTrainer


def test_member_alone_equals_member_in_array_of_five_and_in_a_mixed_array(tiny_bert, cache, tmp_path):
    me = cfg(tiny_bert, cache, "kdmcse", seed=3)
    alone = run([("me", me)], tmp_path / "alone")
    five = run([(f"s{s}", cfg(tiny_bert, cache, "kdmcse", seed=s)) for s in (0, 1)]
               + [("me", me)] + [(f"s{s}", cfg(tiny_bert, cache, "kdmcse", seed=s, lr=1e-4))
                                 for s in (4, 5)], tmp_path / "five")
    mixed = run([("m", cfg(tiny_bert, cache, "mcse", seed=7)), ("d", cfg(tiny_bert, cache, "dalr", seed=8)),
                 ("me", me), ("s", cfg(tiny_bert, cache, "simcse", seed=9))], tmp_path / "mixed")
    assert_same_member(alone[1], alone[2], five[1], five[2], "me", "me")
    assert_same_member(alone[1], alone[2], mixed[1], mixed[2], "me", "me")
    # and a DALR member (teachers shared in one forward) alone vs in the mixed array
    d_alone = run([("d", cfg(tiny_bert, cache, "dalr", seed=8))], tmp_path / "d")
    assert_same_member(d_alone[1], d_alone[2], mixed[1], mixed[2], "d", "d")
    # the members really differ from one another: not a vacuous equality
    devs = {e["key"]: e["stsb_dev"] for e in five[1].metrics[-1]["members"]}
    assert len(set(devs.values())) == len(devs)



def test_dalr_members_with_the_same_teachers_share_one_teacher_forward(tiny_bert, cache, tmp_path,
                                                                       monkeypatch):
    """The teachers run once a step for every DALR member that needs them, not once a member,
    and each DALR member still trains as it does alone."""
    from trainables.arrays import teachers
    from trainables.models.teachers import TextTeacher

    calls, sharing = [], []
    encode_ids, outputs = TextTeacher.encode_ids, teachers.teacher_outputs

    def counting_encode(self, ids, mask):
        calls.append(ids.shape[0])
        return encode_ids(self, ids, mask)

    def counting_outputs(alive, batches, pad):
        before = len(calls)
        out = outputs(alive, batches, pad)
        sharing.append((len(out), len(calls) - before))  # (members served, teacher forwards)
        return out

    monkeypatch.setattr(TextTeacher, "encode_ids", counting_encode)
    monkeypatch.setattr(teachers, "teacher_outputs", counting_outputs)
    both = run([("d1", cfg(tiny_bert, cache, "dalr", seed=1)), ("m", cfg(tiny_bert, cache, "mcse", seed=2)),
                ("d2", cfg(tiny_bert, cache, "dalr", seed=2))], tmp_path / "both")
    served = list(sharing)
    assert any(n == 2 for n, _ in served), served  # some step had both DALR members on captions
    assert all(forwards == (1 if n else 0) for n, forwards in served), served  # one teacher
    monkeypatch.setattr(TextTeacher, "encode_ids", encode_ids)
    monkeypatch.setattr(teachers, "teacher_outputs", outputs)
    for key, seed in (("d1", 1), ("d2", 2)):
        alone = run([(key, cfg(tiny_bert, cache, "dalr", seed=seed))], tmp_path / key)
        assert_same_member(alone[1], alone[2], both[1], both[2], key, key)

def test_plugin_member_alone_equals_it_in_an_array_of_five_and_in_a_mixed_array(
        tiny_bert, cache, tmp_path):
    me = cfg(tiny_bert, cache, "auxhead", seed=3)
    alone = run([("me", me)], tmp_path / "alone")
    five = run([(f"s{s}", cfg(tiny_bert, cache, "auxhead", seed=s)) for s in (0, 1)]
               + [("me", me)] + [(f"s{s}", cfg(tiny_bert, cache, "auxhead", seed=s, **{
                   "objective.beta": 0.1})) for s in (4, 5)], tmp_path / "five")
    mixed = run([("m", cfg(tiny_bert, cache, "mcse", seed=7)), ("d", cfg(tiny_bert, cache, "dalr", seed=8)),
                 ("me", me), ("k", cfg(tiny_bert, cache, "kdmcse", seed=9))], tmp_path / "mixed")
    assert_same_member(alone[1], alone[2], five[1], five[2], "me", "me")
    assert_same_member(alone[1], alone[2], mixed[1], mixed[2], "me", "me")
    # its own head trained per member and its terms were logged on both batch kinds
    logged = {k for e in alone[1].member("me") for k in e}
    assert {"loss/aux", "loss/grounding", "loss/text"} <= logged
    t = five[0]
    assert [type(h.aux).__name__ for h in t.model.heads] == ["Linear"] * 5
    w = [h.aux.weight for h in t.model.heads]
    assert not torch.equal(w[0], w[1])  # seeds 0 and 1: their own init and updates
    devs = {e["key"]: e["stsb_dev"] for e in five[1].metrics[-1]["members"]}
    assert len(set(devs.values())) == len(devs)


@pytest.mark.parametrize("method", ["simcse", "mcse", "kdmcse", "dalr"])
def test_every_method_trains_and_reports_its_terms(method, tiny_bert, cache, tmp_path):
    c = cfg(tiny_bert, cache, method, max_steps=4, eval_every=2, final_eval=False)
    _, reports, _ = run([("a", c)], tmp_path)
    assert [r["step"] for r in reports.metrics] == [2, 4]
    for e in reports.member("a"):
        assert math.isfinite(e["loss/total"]) and e["loss/total"] > 0
        assert 0 <= e["best_stsb_dev"] <= 100
    assert len(reports.ckpts) == 2 and (reports.ckpts[-1] / "state.pt").exists()
    expected = {"simcse": set(), "mcse": {"grounding_image"},
                "kdmcse": {"grounding_image", "grounding_text"},
                "dalr": {"consistency", "cma", "info", "ima", "rank", "g2l"}}[method]
    logged = {k.removeprefix("loss/") for k in reports.member("a")[0] if k.startswith("loss/")}
    assert expected <= logged, (expected, logged)


def test_same_seed_same_result_other_seed_other_result(tiny_bert, cache, tmp_path):
    _, r1, f1 = run([("a", cfg(tiny_bert, cache))], tmp_path / "a")
    _, r2, f2 = run([("a", cfg(tiny_bert, cache))], tmp_path / "b")
    assert [e["loss/total"] for e in r1.member("a")] == [e["loss/total"] for e in r2.member("a")]
    assert f1 == f2
    _, r3, _ = run([("a", cfg(tiny_bert, cache, seed=1))], tmp_path / "c")
    assert [e["loss/total"] for e in r3.member("a")] != [e["loss/total"] for e in r1.member("a")]


@pytest.mark.parametrize("kill_at", [2, 4, 5])
def test_resume_after_kill_matches_uninterrupted(kill_at, tiny_bert, cache, tmp_path, monkeypatch):
    members = [("d", cfg(tiny_bert, cache, "dalr")), ("k", cfg(tiny_bert, cache, "kdmcse", seed=1))]
    ref, ref_reports, ref_final = run(members, tmp_path / "ref")

    r = kill_and_resume(members, kill_at, tmp_path, monkeypatch)
    both, final, resumed = r.reports, r.final, r.trainer
    for key in ("d", "k"):
        assert [e["loss/total"] for e in both.member(key)] == \
            [e["loss/total"] for e in ref_reports.member(key)]
    assert final == ref_final
    for a, b in zip(resumed.model.state_dict().values(), ref.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_checkpoint_from_before_the_method_stream_rename_resumes_the_same(tiny_bert, cache,
                                                                          tmp_path, monkeypatch):
    """Checkpoints written before ``Member.method_rng`` was named for what it is keep the stream
    under "listmle": such a checkpoint restores it, and the resumed DALR member (whose ListMLE
    draws from it at every caption step) trains as the uninterrupted one."""
    members = [("d", cfg(tiny_bert, cache, "dalr"))]
    _, ref_reports, ref_final = run(members, tmp_path / "ref")
    r = kill_and_resume(members, 5, tmp_path, monkeypatch)  # writes the checkpoint of step 3
    ckpt = r.partial.ckpts[-1]
    state = torch.load(ckpt / "state.pt", weights_only=False)
    saved = state["members"]["d"]["method_rng"]
    state["members"]["d"]["listmle"] = state["members"]["d"].pop("method_rng")
    torch.save(state, ckpt / "state.pt")
    old = ArrayTrainer(members)
    assert not torch.equal(old.members[0].method_rng.get_state(), saved)  # the draws moved it
    old.load_state(ckpt)
    assert torch.equal(old.members[0].method_rng.get_state(), saved)
    rest = Reports()
    assert old.fit(rest, tmp_path / "old") == ref_final
    assert [e["loss/total"] for e in r.partial.member("d") + rest.member("d")] == \
        [e["loss/total"] for e in ref_reports.member("d")]


def test_checkpoint_of_another_array_is_refused(tiny_bert, cache, tmp_path):
    _, reports, _ = run([("a", cfg(tiny_bert, cache, max_steps=3, final_eval=False))], tmp_path)
    other = ArrayTrainer([("a", cfg(tiny_bert, cache, seed=9, max_steps=3, final_eval=False))])
    with pytest.raises(ValueError, match="belongs to another array"):
        other.load_state(reports.ckpts[-1])


def test_nan_in_one_member_drops_it_and_the_others_go_on(tiny_bert, cache, tmp_path, monkeypatch):
    good, bad = cfg(tiny_bert, cache, "mcse", seed=0), cfg(tiny_bert, cache, "kdmcse", seed=1)
    _, alone, alone_final = run([("good", good)], tmp_path / "alone")
    monkeypatch.setenv("MMEMB_FAULT_INJECT", f"nan:2:{bad.config_hash()}")
    t, reports, final = run([("bad", bad), ("good", good)], tmp_path / "array")
    failed = [e for r in reports.metrics for e in r["members"] if e.get("failed")]
    assert [e["key"] for e in failed] == ["bad"]
    assert failed[0]["error"].startswith("non-finite loss at step 2: term 'total' is nan")
    assert bad.config_hash() in failed[0]["error"]
    assert set(final) == {"good"} and t.members[0].record.error
    assert_same_member(alone, alone_final, reports, final, "good", "good")


def test_a_non_finite_term_is_named_and_only_its_member_leaves(
        tiny_bert, cache, tmp_path, monkeypatch):
    from trainables.arrays import batched as trainer_mod

    real = trainer_mod.compute_objective

    def poisoned(ocfg, out, teacher, generator=None):
        terms = real(ocfg, out, teacher, generator=generator)
        if teacher is not None and ocfg.method == "kdmcse":  # its first caption batch goes bad
            terms["grounding_image"] = terms["grounding_image"] * float("nan")
            terms["total"] = terms["total"] + terms["grounding_image"]
        return terms

    monkeypatch.setattr(trainer_mod, "compute_objective", poisoned)
    k, m = cfg(tiny_bert, cache, "kdmcse", seed=0), cfg(tiny_bert, cache, "mcse", seed=1)
    t = ArrayTrainer([("k", k), ("m", m)])
    terms = t.train_step()  # step 1 of the official schedule is a caption batch; held on purpose
    assert set(terms) == {"m"} and [x.key for x in t.alive] == ["m"]
    assert t.model.n_members == 1 and t.optimizer.n_members == 1
    err = t.members[0].record.error
    assert err.startswith(f"non-finite loss at step 1: term 'grounding_image' is nan (config {k.config_hash()})")
    assert "precision=fp32" in err
    reports = Reports()
    final = t.fit(reports, tmp_path)
    assert [e["key"] for r in reports.metrics for e in r["members"] if e.get("failed")] == ["k"]
    assert set(final) == {"m"}


def test_every_member_failing_ends_the_array_with_its_reasons(tiny_bert, cache, tmp_path, monkeypatch):
    c = cfg(tiny_bert, cache, "mcse", max_steps=4, eval_every=2)
    monkeypatch.setenv("MMEMB_FAULT_INJECT", f"nan:1:{c.config_hash()}")
    t, reports, final = run([("only", c)], tmp_path)
    assert final == {} and t.step == 1 and not t.alive
    assert reports.metrics == [{"step": 1, "epoch": 0, "members": [
        {"key": "only", "failed": 1, "error": t.members[0].record.error}]}]
    assert reports.ckpts == []


def test_feature_size_that_cma_cannot_use_is_refused_before_any_model(tiny_bert, cache, monkeypatch):
    from trainables.arrays.encoder import StackedEncoder

    wide = cfg(tiny_bert, cache, "dalr", **{"data.demo_dim": 48})
    mcse = cfg(tiny_bert, cache, "mcse", seed=1)
    built = []
    real = StackedEncoder.from_pretrained
    monkeypatch.setattr(StackedEncoder, "from_pretrained",
                        lambda *a, **k: built.append(1) or real(*a, **k))
    for members in ([("d", wide)], [("m", mcse), ("d", wide)]):  # alone, or behind a good member
        with pytest.raises(ValueError, match=r"'image' features are 48-d but DALR's CMA .* student's "
                                             r"32-d embedding.*objective.use_cma=false"):
            ArrayTrainer(members)
    assert not built  # refused before any model was loaded
    no_cma = wide.with_overrides({"objective.use_cma": False})  # without CMA it is fine
    t = ArrayTrainer([("m", mcse), ("d", no_cma)])
    assert built and [m.data.image_dim for m in t.members] == [32, 48]


def test_members_that_cannot_share_an_array_are_refused(tiny_bert, cache):
    with pytest.raises(ValueError, match="must share 'batch_size'"):
        ArrayTrainer([("a", cfg(tiny_bert, cache)), ("b", cfg(tiny_bert, cache, batch_size=4))])
    with pytest.raises(ValueError, match="same number of steps"):
        ArrayTrainer([("a", cfg(tiny_bert, cache)), ("b", cfg(tiny_bert, cache, max_steps=4))])
    with pytest.raises(ValueError, match="distinct"):
        ArrayTrainer([("a", cfg(tiny_bert, cache)), ("a", cfg(tiny_bert, cache, seed=1))])


def test_successive_halving_drops_whole_groups(tiny_bert, cache, tmp_path):
    members = [(f"c{c}/s{s}", cfg(tiny_bert, cache, "mcse", seed=s, lr=lr))
               for c, lr in enumerate((1e-5, 1e-3, 1e-4, 3e-5)) for s in (0, 1)]
    groups = {k: k.split("/")[0] for k, _ in members}
    t, reports, final = run(members, tmp_path, halving=((3,), 2.0), groups=groups)
    pruned = [e for r in reports.metrics for e in r["members"] if e.get("pruned")]
    assert len(pruned) == 4 and all(e["step"] == 3 for e in pruned)
    kept = {k.split("/")[0] for k in final}
    assert len(kept) == 2 and len(final) == 4  # both seeds of each kept configuration
    at3 = {e["key"]: e["stsb_dev"] for e in reports.metrics[0]["members"] if "stsb_dev" in e}
    mean = {g: (at3[f"{g}/s0"] + at3[f"{g}/s1"]) / 2 for g in set(groups.values())}
    assert kept == set(sorted(mean, key=mean.get)[-2:])  # the two best means stay


def test_final_eval_and_export_use_the_best_weights(tiny_bert, cache, tmp_path):
    from trainables.evaluation.sts import evaluate_sts
    from trainables.models.student import Student

    t, reports, final = run([("a", cfg(tiny_bert, cache, "mcse", lr=3e-3))], tmp_path)
    for k in ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness",
              "avg", "alignment", "uniformity"):
        assert math.isfinite(final["a"][f"test/{k}"]), k
    devs = [e["stsb_dev"] for e in reports.member("a")]
    assert final["a"]["best_stsb_dev"] == max(devs)
    assert t.evaluate_dev()[0] == pytest.approx(max(devs), abs=1e-6)  # the best is loaded
    folder = t.export_best(tmp_path / "export")["a"]
    assert (folder / "MLmodel").is_file()
    student = Student.from_pretrained(folder / "model.sentence_transformer")
    res = evaluate_sts(lambda s: student.encode(s), t.members[0].data.senteval_dir)
    assert res["avg"] == pytest.approx(final["a"]["test/avg"], abs=1e-4)


def test_threshold_filter_share_is_logged_and_a_filter_masking_everything_stops_its_member(
        tiny_bert, cache, tmp_path, monkeypatch):
    # The pre-start sample refuses such a threshold (tests/trainables/data/test_filter_stats.py); this
    # is the backstop for batches the sample did not foresee, so the sample is switched off here.
    import trainables.data.batches

    monkeypatch.setattr(trainables.data.batches, "threshold_sample", lambda cfg, data: None)
    ok = cfg(tiny_bert, cache, "kdmcse", seed=0, max_steps=9, **{"objective.threshold": 0.8})
    blind = cfg(tiny_bert, cache, "kdmcse", seed=1, max_steps=9, **{"objective.threshold": -100.0})
    plain = cfg(tiny_bert, cache, "mcse", seed=2, max_steps=9)
    _, reports, final = run([("ok", ok), ("blind", blind), ("plain", plain)], tmp_path)
    shares = [e["filter/masked_fraction"] for e in reports.member("ok") if "filter/masked_fraction" in e]
    assert shares and all(0.0 <= s < 1.0 for s in shares)
    assert not any("filter/masked_fraction" in e for e in reports.member("plain"))
    (gone,) = [e for r in reports.metrics for e in r["members"] if e.get("failed")]
    assert gone["key"] == "blind"
    assert "masked every negative in 3 caption batches in a row" in gone["error"]
    assert "threshold -100.0" in gone["error"] and "threshold_on=cosine" in gone["error"]
    assert set(final) == {"ok", "plain"}


def test_progress_tells_the_step_at_the_start_and_every_progress_s(tiny_bert, cache, tmp_path,
                                                                    monkeypatch):
    """The live view's steps between evaluations: rank 0 says where the array stands."""
    import trainables.arrays.trainer as trainer_module

    told = []
    monkeypatch.setattr(trainer_module, "PROGRESS_S", 1e9)
    t = ArrayTrainer([("a", cfg(tiny_bert, cache, max_steps=4, final_eval=False))])
    t.fit(Reports(), tmp_path / "long", progress=told.append)
    assert told == [{"step": 0, "total_steps": 4}]  # at the start, then not before PROGRESS_S
    monkeypatch.setattr(trainer_module, "PROGRESS_S", 0.0)
    told.clear()
    t = ArrayTrainer([("a", cfg(tiny_bert, cache, max_steps=4, final_eval=False))])
    t.fit(Reports(), tmp_path / "every", progress=told.append)
    assert told == [{"step": s, "total_steps": 4} for s in range(4)]


def test_transfer_tasks_of_a_member_do_not_depend_on_its_array(tiny_bert, cache, tmp_path):
    from trainables.testing import write_transfer_data

    senteval = write_transfer_data(tmp_path / "senteval", n=14)
    tr = {"transfer": "fast", "data.senteval": str(senteval)}
    me = cfg(tiny_bert, cache, "mcse", seed=3, **tr)
    _, _, alone = run([("me", me)], tmp_path / "alone")
    # "o" at a high lr: its embeddings move far from the shared init, so its probes differ
    _, _, three = run([("o", cfg(tiny_bert, cache, "kdmcse", seed=1, lr=1e-2, **tr)), ("me", me),
                       ("off", cfg(tiny_bert, cache, "mcse", seed=2, **{"data.senteval": str(senteval)}))],
                      tmp_path / "three")
    keys = [k for k in alone["me"] if k.startswith("transfer/") and not k.endswith("/seconds")]
    assert {f"transfer/{t}" for t in ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC", "avg")} <= set(keys)
    for k in keys:
        assert 0.0 <= alone["me"][k] <= 100.0 and three["me"][k] == pytest.approx(alone["me"][k], abs=TOL), k
    assert not any(k.startswith("transfer/") for k in three["off"])  # transfer is per member
    assert any(three["o"][k] != three["me"][k] for k in keys)  # other embeddings, other probes


def test_the_final_evaluation_tells_progress_what_it_evaluates(tiny_bert, cache, tmp_path):
    """The live view's source once the steps are done: STS, then each transfer task in turn."""
    from trainables.testing import write_transfer_data

    senteval = write_transfer_data(tmp_path / "senteval", n=14)
    heard = []
    t = ArrayTrainer([("m", cfg(tiny_bert, cache, "mcse", transfer="fast", **{"data.senteval": str(senteval)}))])
    t.fit(Reports(), tmp_path / "run", progress=heard.append)
    said = [h["evaluating"] for h in heard if "evaluating" in h]
    tasks = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
    assert said == ["STS"] + [f"transfer {n} ({i}/7)" for i, n in enumerate(tasks, 1)]
    assert all(h["step"] == h["total_steps"] == t.total_steps for h in heard if "evaluating" in h)


def test_a_run_says_once_which_optimizer_path_it_takes(tiny_bert, cache, capsys, monkeypatch):
    """As nanoGPT's "using fused AdamW": the first array a process builds (on rank 0) prints the
    AdamW update it runs (``kernels.py``); later arrays and other ranks say nothing."""
    from trainables.arrays import kernels

    monkeypatch.setattr(kernels, "_announced", False)
    c = cfg(tiny_bert, cache, "mcse", max_steps=2)
    ArrayTrainer([("a", c)], rank=1)
    assert "optimizer:" not in capsys.readouterr().out
    ArrayTrainer([("a", c)])
    ArrayTrainer([("b", c)])
    assert capsys.readouterr().out.count(kernels.optimizer_path()) == 1
    assert kernels.optimizer_path().startswith("optimizer: fused AdamW")
