"""DALR's teachers of one architecture as one stacked forward (trainables/arrays/stacked_teachers.py):
the same embeddings and token states as each teacher's own Hugging Face forward, for every
pooler, BERT and RoBERTa; frozen, one copy of the weights, bf16 kept; the one-by-one path where
the teachers cannot be stacked; and the trainer building one stack per distinct ensemble."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.trainables.arrays.harness import cfg
from tests.trainables.models.test_teachers import _ids
from trainables.arrays.stacked_teachers import StackedTeachers, unstackable
from trainables.arrays.trainer import ArrayTrainer
from trainables.models.teachers import TeacherEnsemble, TextTeacher

POOLERS = ("cls_before_pooler", "cls", "avg")


@pytest.fixture(scope="module")
def roberta_b(tmp_path_factory):
    from trainables.testing import make_tiny_roberta

    return make_tiny_roberta(tmp_path_factory.mktemp("roberta-b"), seed=1)


def _teachers(paths, poolers, dtype=torch.float32) -> list[TextTeacher]:
    return [TextTeacher(p, pooler=q, dtype=dtype, device="cpu", name=f"t{i}")
            for i, (p, q) in enumerate(zip(paths, poolers, strict=True))]


def _separate(paths, poolers, tok, dtype=torch.float32):
    """Each teacher's own forward, from models that were never stacked."""
    return [t.encode(tok["input_ids"], tok["attention_mask"])
            for t in _teachers(paths, poolers, dtype)]


def _assert_same(got, want, atol=1e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.emb.dtype == g.local.dtype == torch.float32
        assert not g.emb.requires_grad and not g.local.requires_grad
        torch.testing.assert_close(g.emb, w.emb, atol=atol, rtol=0)
        torch.testing.assert_close(g.local, w.local, atol=atol, rtol=0)
        assert torch.equal(g.local_mask, w.local_mask)


@pytest.mark.parametrize("poolers", [(p, p) for p in POOLERS] + [("cls", "avg")])
@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_stacked_forward_equals_each_teachers_own(arch, poolers, request, tiny_bert, bert_b,
                                                 tiny_roberta, roberta_b):
    paths = (tiny_bert, bert_b) if arch == "bert" else (tiny_roberta, roberta_b)
    tok = _ids(paths[0])  # padded: the masks and RoBERTa's positions matter
    assert (tok["attention_mask"] == 0).any()
    want = _separate(paths, poolers, tok)
    teachers = _teachers(paths, poolers)
    stack = StackedTeachers.build(teachers)
    assert stack is not None and stack.encoder.n_members == 2
    _assert_same(stack.encode(tok["input_ids"], tok["attention_mask"]), want)
    # the models now read the stack's weights and still compute what they did
    _assert_same(TeacherEnsemble(teachers, (0.33, 0.67)).encode(tok["input_ids"],
                                                                tok["attention_mask"]), want)


def test_the_stack_is_frozen_and_holds_the_only_copy_of_the_weights(tiny_bert, bert_b):
    teachers = [TextTeacher(p, device="cpu", name=f"t{i}") for i, p in enumerate((tiny_bert, bert_b))]
    stack = StackedTeachers.build(teachers)
    assert not isinstance(stack, torch.nn.Module)  # never a submodule of the student
    assert not stack.encoder.training
    assert all(not p.requires_grad for p in stack.encoder.parameters())
    stacked = dict(stack.encoder.named_parameters())
    for i, t in enumerate(teachers):
        assert not t.model.training
        for key, p in t.model.named_parameters():
            assert not p.requires_grad
            if key.startswith("pooler."):
                continue  # the stack stores no pooler: the model keeps its own
            row = stacked[key.replace(".", "__")][i]
            assert p.data_ptr() == row.data_ptr() and p.shape == row.shape


def test_bf16_teachers_stay_bf16_in_the_stack(tiny_bert, bert_b):
    tok = _ids(tiny_bert)
    want = _separate((tiny_bert, bert_b), ("cls_before_pooler", "avg"), tok, torch.bfloat16)
    teachers = _teachers((tiny_bert, bert_b), ("cls_before_pooler", "avg"), torch.bfloat16)
    stack = StackedTeachers.build(teachers)
    assert {p.dtype for p in stack.encoder.parameters()} == {torch.bfloat16}
    # bf16 rounding: the forwards differ in the order of a few additions
    _assert_same(stack.encode(tok["input_ids"], tok["attention_mask"]), want, atol=5e-2)


def test_teachers_that_cannot_be_stacked_run_one_by_one(tiny_bert, bert_b, tiny_roberta,
                                                        tiny_clip, tmp_path):
    from trainables.testing import make_tiny_bert

    names = itertools.count()

    def t(path, **kw):
        return TextTeacher(path, device="cpu", name=f"x{next(names)}", **kw)

    wide = make_tiny_bert(tmp_path / "wide", hidden=48)
    cases = [
        ([t(tiny_bert)], "one teacher"),
        ([t(tiny_bert), t(tiny_roberta)], "differ in model_type"),
        ([t(tiny_bert), t(tiny_clip)], "clip text tower"),
        ([t(tiny_bert), t(wide)], "differ in hidden_size"),
        ([t(tiny_bert), t(bert_b, retokenize=True)], "retokenize=True"),
        ([t(tiny_bert), t(bert_b, dtype=torch.bfloat16)], "one dtype and device"),
    ]
    for teachers, why in cases:
        assert why in unstackable(teachers)
        assert StackedTeachers.build(teachers) is None


def test_members_with_the_same_teachers_share_one_stack(tiny_bert, bert_b, cache, monkeypatch):
    """Two DALR members with two distinct BERT teachers: one stack for both, and their teachers'
    Hugging Face forwards are never called; a member with one teacher keeps its model."""
    two = {"text_teachers": [str(tiny_bert), str(bert_b)], "objective.teacher_weights": [0.33, 0.67]}
    t = ArrayTrainer([("d1", cfg(tiny_bert, cache, "dalr", seed=1, **two)),
                      ("d2", cfg(tiny_bert, cache, "dalr", seed=2, **two))])
    d1, d2 = t.members
    assert d1.teacher_stack is not None and d1.teacher_stack is d2.teacher_stack
    assert d1.teacher_stack.teachers == d1.teachers.teachers
    hf, stacked = [], []
    encode_ids, encode = TextTeacher.encode_ids, StackedTeachers.encode
    monkeypatch.setattr(TextTeacher, "encode_ids",
                        lambda self, *a: hf.append(1) or encode_ids(self, *a))
    monkeypatch.setattr(StackedTeachers, "encode",
                        lambda self, *a: stacked.append(1) or encode(self, *a))
    for _ in range(4):
        t.train_step()
    assert stacked and not hf
    (one,) = ArrayTrainer([("one", cfg(tiny_bert, cache, "dalr", seed=3))]).members
    assert one.teachers is not None and one.teacher_stack is None
