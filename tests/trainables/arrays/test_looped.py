"""The looped fallback: encoders the stacked encoder cannot express (DistilBERT, MPNet) train as
one Hugging Face model per member, with the same contract as stacked members.

Encoder level: the choice follows the config; non-encoders are refused in one line; a DistilBERT
rewritten from BERT computes through the loop what the stacked BERT computes; a member's dropout
comes from its own generator and its own rows only. Trainer level: a fallback member alone equals
the same member in a looped array of four and in a mixed-method array (CPU, fp32, within 1e-5)
and beside a member that leaves with a NaN loss; a DistilBERT and an MPNet student train,
evaluate, checkpoint, resume exactly and export a model that sentence-transformers loads.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.trainables.arrays.harness import (
    TOL,
    assert_same_member,
    cfg,
    kill_and_resume,
    run,
)
from trainables.arrays.encoder import StackedEncoder
from trainables.arrays.looped import LoopedEncoder, build_encoder, fallback_note, member_rng


@pytest.fixture(scope="module")
def bert_as_distil(tiny_bert, tmp_path_factory):
    from trainables.models.pretrained import write_bert_as_distilbert

    return write_bert_as_distilbert(tiny_bert, tmp_path_factory.mktemp("bert-as-distilbert"))


def padded(vocab: int, pad: int, lengths: list[int], length: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (len(lengths), length), generator=g)
    mask = (torch.arange(length) < torch.tensor(lengths)[:, None]).long()
    return ids.masked_fill(mask == 0, pad), mask


def pad_rows(x: torch.Tensor, rows: int, length: int, value: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, length - x.shape[1], 0, rows - x.shape[0]), value=value)


# ------------------------------------------------------------------------------- the choice
def test_the_config_decides_stacked_or_looped(tiny_bert, tiny_distilbert, tiny_mpnet, tmp_path):
    from transformers import AutoConfig, BertModel

    assert isinstance(build_encoder(tiny_bert, 2), StackedEncoder)
    assert fallback_note(AutoConfig.from_pretrained(tiny_bert)) is None
    for path, kind in ((tiny_distilbert, "distilbert"), (tiny_mpnet, "mpnet")):
        enc = build_encoder(path, 2)
        assert isinstance(enc, LoopedEncoder) and enc.n_members == 2
        assert enc.note.startswith(f"{kind}: not expressible as a stacked array (model_type='{kind}'")
        assert enc.note.endswith("members train one by one (slower: no shared batched forward)")
        assert "\n" not in enc.note
    # a BERT with relative positions is a BERT the stacked forward does not implement
    cfg = AutoConfig.from_pretrained(tiny_bert)
    cfg.position_embedding_type = "relative_key"
    BertModel(cfg).save_pretrained(tmp_path / "rel")
    from trainables.testing import write_bert_tokenizer

    write_bert_tokenizer(tmp_path / "rel")
    enc = build_encoder(tmp_path / "rel", 1)
    assert isinstance(enc, LoopedEncoder) and "position_embedding_type='relative_key'" in enc.note


@pytest.mark.parametrize("make, match", [
    (lambda: __import__("transformers").GPT2Config(n_layer=1, n_embd=16, n_head=2),
     "model_type 'gpt2', which is not a bidirectional text encoder"),
    (lambda: __import__("transformers").T5Config(d_model=16, num_layers=1, num_heads=2),
     r"is an encoder-decoder model \(t5\)"),
    (lambda: __import__("transformers").BertConfig(is_decoder=True), "configured as a decoder"),
])
def test_what_is_not_a_bidirectional_encoder_is_refused_in_one_line(make, match, tmp_path):
    from trainables.models.student import Student, StudentConfig, check_encoder_only

    cfg = make()
    with pytest.raises(ValueError, match=match) as err:
        check_encoder_only(cfg, "x")
    assert "\n" not in str(err.value) and "DistilBERT or MPNet" in str(err.value)
    cfg.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=match):  # before any weight or tokenizer is read
        Student(StudentConfig(encoder=str(tmp_path), method="simcse"))
    with pytest.raises(ValueError, match=match):
        LoopedEncoder.from_pretrained(tmp_path, 1)


# ------------------------------------------------------------------------------- the RNG
def test_member_rng_continues_the_members_stream_and_restores_the_global_one():
    torch.manual_seed(5)
    expected_global = torch.rand(3)
    torch.manual_seed(5)
    g, twin = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    with member_rng(g):
        inside = torch.rand(4)  # what HF dropout does: draw from the global RNG
    assert torch.equal(torch.rand(3), expected_global)  # the global stream never moved
    assert torch.equal(inside, torch.rand(4, generator=twin))
    # g advanced by exactly what the block drew
    assert torch.equal(torch.rand(2, generator=g), torch.rand(2, generator=twin))


# ------------------------------------------------------------------------------- the forward
def test_looped_distilbert_computes_what_the_stacked_bert_computes(tiny_bert, bert_as_distil):
    """The DistilBERT rewritten from BERT, looped, equals the stacked BERT member by member: the
    loop's cut to each member's rows and positions, its padding back and its first-token
    embedding are those of the stacked encoder."""
    from transformers import AutoConfig, AutoModel

    from trainables.models.pretrained import bert_state_as_distilbert

    bert = AutoModel.from_pretrained(tiny_bert, dtype=torch.float32).state_dict()
    g = torch.Generator().manual_seed(0)
    states = [bert, {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in bert.items()}]
    stacked = StackedEncoder(AutoConfig.from_pretrained(tiny_bert), states)
    looped = LoopedEncoder.from_pretrained(bert_as_distil, 2)
    cfg = stacked.hf_config
    for i, sd in enumerate(states):
        looped.load_member_state_dict(i, bert_state_as_distilbert(sd, cfg.num_hidden_layers))
    a = padded(cfg.vocab_size, cfg.pad_token_id, [7, 3, 5], 7, seed=1)
    b = padded(cfg.vocab_size, cfg.pad_token_id, [4, 2], 4, seed=2)
    ids = torch.stack([a[0], pad_rows(b[0], 3, 7, cfg.pad_token_id)])
    mask = torch.stack([a[1], pad_rows(b[1], 3, 7, 0)])
    with torch.no_grad():
        for x, m in ((ids, mask), (a[0], a[1])):  # per-member rows, and rows shared by all
            ref, out = stacked(x, m), looped(x, m)
            real = (m if m.dim() == 3 else m.expand(2, -1, -1)).bool()
            torch.testing.assert_close(out[real], ref[real], rtol=0, atol=TOL)
    assert not torch.allclose(out[0], out[1])  # the members really differ
    # gradients stay in their member
    looped(ids, mask)[0, :, 0].square().sum().backward()
    assert all(p.grad is not None and p.grad.any() for p in looped.member_parameters(0)[:3])
    assert all(p.grad is None or not p.grad.any() for p in looped.member_parameters(1))


def test_a_members_dropout_depends_only_on_its_generator_and_its_rows(tiny_distilbert):
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(tiny_distilbert)
    rows = [padded(cfg.vocab_size, cfg.pad_token_id, lens, max(lens), seed=s)
            for s, lens in enumerate(([5, 2, 6], [3, 4], [8, 1, 2]))]
    n, length = 3, 8
    ids = torch.stack([pad_rows(i, n, length, cfg.pad_token_id) for i, _ in rows])
    mask = torch.stack([pad_rows(m, n, length, 0) for _, m in rows])
    array = LoopedEncoder.from_pretrained(tiny_distilbert, 3)
    alone = LoopedEncoder.from_pretrained(tiny_distilbert, 1)
    gens = [torch.Generator().manual_seed(s) for s in (10, 11, 12)]
    state = torch.get_rng_state()
    out = array(ids, mask, gens)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is left as it was
    mine_ids, mine_mask = rows[1]
    solo = alone(mine_ids[None], mine_mask[None], [torch.Generator().manual_seed(11)])
    torch.testing.assert_close(out[1, :2, :4], solo[0], rtol=0, atol=0)  # bit for bit
    assert torch.equal(out[1, 2:], torch.zeros_like(out[1, 2:]))  # padding rows are 0
    with torch.no_grad():
        plain = array(ids, mask)
    assert not torch.allclose(out[1, :2, :4], plain[1, :2, :4])  # dropout was on
    again = array(ids, mask, [torch.Generator().manual_seed(s) for s in (10, 11, 12)])
    torch.testing.assert_close(again, out, rtol=0, atol=0)  # same streams, same masks


def test_select_keeps_each_members_modules(tiny_mpnet):
    enc = LoopedEncoder.from_pretrained(tiny_mpnet, 3)
    params = [enc.member_parameters(i) for i in range(3)]
    assert all(not p.requires_grad for p in enc.members[0].pooler.parameters())  # never used
    enc.select([2, 0])
    assert enc.n_members == 2
    assert [p is q for p, q in zip(enc.member_parameters(0), params[2], strict=True)] == [True] * len(params[2])
    with pytest.raises(ValueError, match="distinct member indices"):
        enc.select([0, 0])


# ------------------------------------------------------------------------------- the trainer
def test_fallback_member_alone_equals_it_in_a_looped_array_of_four_and_in_a_mixed_one(
        tiny_distilbert, cache, tmp_path):
    me = cfg(tiny_distilbert, cache, "kdmcse", seed=3)
    alone = run([("me", me)], tmp_path / "alone")
    four = run([("s0", cfg(tiny_distilbert, cache, "kdmcse", seed=0)), ("me", me),
                ("s4", cfg(tiny_distilbert, cache, "kdmcse", seed=4, lr=1e-4)),
                ("s5", cfg(tiny_distilbert, cache, "kdmcse", seed=5))], tmp_path / "four")
    mixed = run([("m", cfg(tiny_distilbert, cache, "mcse", seed=7)),
                 ("d", cfg(tiny_distilbert, cache, "dalr", seed=8)), ("me", me),
                 ("s", cfg(tiny_distilbert, cache, "simcse", seed=9))], tmp_path / "mixed")
    assert isinstance(four[0].model.encoder, LoopedEncoder)
    assert_same_member(alone[1], alone[2], four[1], four[2], "me")
    assert_same_member(alone[1], alone[2], mixed[1], mixed[2], "me")
    devs = {e["key"]: e["stsb_dev"] for e in four[1].metrics[-1]["members"]}
    assert len(set(devs.values())) == len(devs)  # not a vacuous equality


def test_a_looped_member_with_a_nan_loss_leaves_and_the_other_goes_on(
        tiny_distilbert, cache, tmp_path, monkeypatch):
    good = cfg(tiny_distilbert, cache, "mcse", seed=0, max_steps=4, eval_every=2)
    bad = cfg(tiny_distilbert, cache, "kdmcse", seed=1, max_steps=4, eval_every=2)
    _, alone, alone_final = run([("good", good)], tmp_path / "alone")
    monkeypatch.setenv("MMEMB_FAULT_INJECT", f"nan:2:{bad.config_hash()}")
    t, reports, final = run([("bad", bad), ("good", good)], tmp_path / "array")
    failed = [e for r in reports.metrics for e in r["members"] if e.get("failed")]
    assert [e["key"] for e in failed] == ["bad"] and set(final) == {"good"}
    assert t.model.encoder.n_members == 1 and t.optimizer.n_members == 1
    assert_same_member(alone, alone_final, reports, final, "good")


@pytest.mark.parametrize("encoder", ["tiny_distilbert", "tiny_mpnet"])
def test_fallback_student_trains_evaluates_checkpoints_resumes_and_exports(
        encoder, request, cache, tmp_path, monkeypatch, capsys):
    from sentence_transformers import SentenceTransformer

    from trainables.evaluation.sts import evaluate_sts
    from trainables.models.student import Student

    path = request.getfixturevalue(encoder)
    members = [("k", cfg(path, cache, "kdmcse", seed=0)), ("m", cfg(path, cache, "mcse", seed=1))]
    ref, ref_reports, ref_final = run(members, tmp_path / "ref")
    printed = [line for line in capsys.readouterr().out.splitlines() if "not expressible" in line]
    assert printed == [ref.note]  # once per array, not per member

    r = kill_and_resume(members, 5, tmp_path, monkeypatch)
    assert (r.partial.ckpts[-1] / "state.pt").is_file() and r.start == 3
    both, final, resumed = r.reports, r.final, r.trainer
    for key in ("k", "m"):
        assert [e["loss/total"] for e in both.member(key)] == \
            [e["loss/total"] for e in ref_reports.member(key)]
    assert final == ref_final
    for a, b in zip(resumed.model.state_dict().values(), ref.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    for key in ("k", "m"):
        assert all(math.isfinite(final[key][f"test/{t}"]) for t in ("avg", "STSBenchmark", "uniformity"))
        assert final[key]["best_stsb_dev"] == max(e["stsb_dev"] for e in ref_reports.member(key))
    # the exported best student is the evaluated one, as a Student and for sentence-transformers
    folder = resumed.export_best(tmp_path / "export")["m"]
    student = Student.from_pretrained(folder / "model.sentence_transformer")
    senteval = resumed.members[0].data.senteval_dir
    res = evaluate_sts(lambda s: student.encode(s), senteval)
    assert res["avg"] == pytest.approx(final["m"]["test/avg"], abs=1e-4)
    st = SentenceTransformer(str(folder / "model.sentence_transformer"), device="cpu")
    sents = ["a dog runs on the beach .", "two cats"]
    torch.testing.assert_close(torch.as_tensor(st.encode(sents)), student.encode(sents),
                               rtol=0, atol=1e-5)


def test_the_demo_student_written_as_distilbert_computes_the_same_embeddings(minilm, tmp_path):
    """``minilm-l6-top1-distilbert`` (the looped demo) is the demo student as a DistilBERT:
    the same tokens and, without dropout, the same [CLS] embeddings."""
    from transformers import AutoTokenizer

    from trainables.models.pretrained import MINILM_TOP1, MINILM_TOP1_DISTILBERT, resolve_encoder

    bert, distil = (resolve_encoder(n, tmp_path) for n in (MINILM_TOP1, MINILM_TOP1_DISTILBERT))
    sents = ["a man rides a horse on the beach .", "two dogs play in the snow", "hello"]
    tb, td = AutoTokenizer.from_pretrained(bert), AutoTokenizer.from_pretrained(distil)
    eb, ed = tb(sents, padding=True, return_tensors="pt"), td(sents, padding=True, return_tensors="pt")
    assert torch.equal(eb["input_ids"], ed["input_ids"]) and "token_type_ids" not in ed
    stacked = StackedEncoder.from_pretrained(bert, 1)
    looped = LoopedEncoder.from_pretrained(distil, 1)
    assert looped.hf_config.model_type == "distilbert"
    with torch.no_grad():
        ref = stacked(eb["input_ids"], eb["attention_mask"])[:, :, 0]
        out = looped(ed["input_ids"], ed["attention_mask"])[:, :, 0]
    torch.testing.assert_close(out, ref, rtol=0, atol=TOL)
    assert resolve_encoder(MINILM_TOP1_DISTILBERT, tmp_path) == distil  # built once, then reused
