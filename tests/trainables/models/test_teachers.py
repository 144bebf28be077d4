"""Frozen text teachers: pooler rule, freezing, vocab checks, weights."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer, CLIPModel

from trainables.models.teachers import (
    TeacherEnsemble,
    TextTeacher,
    default_pooler,
)

CAPTIONS = [
    "a dog runs on the grass",
    "two people sit at a table in a small kitchen",
    "a red car",
    "a young girl rides a bike in the park near the beach with her old dog",
    "the boat is on the water",
    "a man holds a guitar",
    "people playing music at night",
]


@pytest.fixture(scope="module")
def simcse_path(tiny_bert, tmp_path_factory):
    """tiny_bert copied under a name containing "simcse" (the official pooler rule reads the path)."""
    dst = tmp_path_factory.mktemp("t") / "sup-simcse-tiny"
    shutil.copytree(tiny_bert, dst)
    return dst


def _ids(path, texts=CAPTIONS, max_length=32):
    return AutoTokenizer.from_pretrained(path)(
        texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"
    )


def test_default_pooler_rule_is_case_sensitive():
    assert default_pooler("Model/simcse") == "cls_before_pooler"
    assert default_pooler("voidism/DiffCSE-bert") == "cls_before_pooler"
    assert default_pooler("princeton-nlp/sup-simcse-bert-base-uncased") == "cls_before_pooler"
    assert default_pooler("Model/SimCSE") == "avg"  # the official substring test is case-sensitive
    assert default_pooler("voidism/diffcse-bert-base-uncased-sts") == "avg"
    assert default_pooler("sentence-transformers/all-mpnet-base-v2") == "avg"


def test_poolers_match_hand_computation(simcse_path, tiny_bert):
    tok = _ids(tiny_bert)
    ref = AutoModel.from_pretrained(tiny_bert).eval()
    with torch.no_grad():
        out = ref(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"])
    h, m = out.last_hidden_state, tok["attention_mask"]

    cls_t = TextTeacher(simcse_path, device="cpu")
    assert cls_t.pooler == "cls_before_pooler" and cls_t.dtype == torch.float32
    emb, local = cls_t.encode_ids(tok["input_ids"], tok["attention_mask"])
    torch.testing.assert_close(emb, h[:, 0])
    torch.testing.assert_close(local, h[:, 1:])
    assert local.shape == (len(CAPTIONS), tok["input_ids"].shape[1] - 1, 32)

    avg_t = TextTeacher(tiny_bert, device="cpu")
    assert avg_t.pooler == "avg"
    want = torch.stack([h[i, : int(m[i].sum())].mean(0) for i in range(len(CAPTIONS))])
    torch.testing.assert_close(avg_t.encode_ids(tok["input_ids"], m)[0], want)

    pooled_t = TextTeacher(tiny_bert, pooler="cls", device="cpu")
    torch.testing.assert_close(pooled_t.encode_ids(tok["input_ids"], m)[0], out.pooler_output)
    with pytest.raises(ValueError, match="pooler 'max' is not valid"):
        TextTeacher(tiny_bert, pooler="max", device="cpu")


def test_teacher_is_frozen_and_outside_the_optimizer(tiny_bert):
    teacher = TextTeacher(tiny_bert, device="cpu", student_tokenizer=tiny_bert)
    assert not teacher.model.training
    assert all(not p.requires_grad for p in teacher.model.parameters())

    class Student(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(32, 32)
            self.ensemble = TeacherEnsemble([teacher], [1.0])  # held as an attribute, as DALR does

    student = Student()
    opt = torch.optim.AdamW(student.parameters())
    in_opt = {id(p) for g in opt.param_groups for p in g["params"]}
    assert in_opt == {id(p) for p in student.lin.parameters()}
    assert not in_opt & {id(p) for p in teacher.model.parameters()}

    tok = _ids(tiny_bert)
    emb, local = teacher.encode_ids(tok["input_ids"], tok["attention_mask"])
    assert not emb.requires_grad and not local.requires_grad
    # usable as a constant in a student loss: backward reaches the student, not the teacher
    loss = (student.lin(emb) - emb).pow(2).mean()
    loss.backward()
    assert student.lin.weight.grad is not None
    assert all(p.grad is None for p in teacher.model.parameters())


def test_vocab_mismatch_is_a_clear_error(tiny_bert, tiny_roberta):
    with pytest.raises(ValueError, match=r"does not share the student's vocabulary.*retokenize=True") as err:
        TextTeacher(tiny_roberta, device="cpu", student_tokenizer=tiny_bert)
    msg = str(err.value)
    assert str(tiny_roberta) in msg and str(tiny_bert) in msg and "\n" not in msg
    # the escape hatch: the teacher reads the raw captions with its own tokenizer
    t = TextTeacher(tiny_roberta, device="cpu", student_tokenizer=tiny_bert, retokenize=True)
    out = t.encode(texts=CAPTIONS[:3])
    own = _ids(tiny_roberta, CAPTIONS[:3])
    assert torch.equal(out.local_mask, own["attention_mask"][:, 1:])
    torch.testing.assert_close(out.emb, t.encode_ids(own["input_ids"], own["attention_mask"])[0])
    with pytest.raises(ValueError, match="pass the raw captions"):
        t.encode(own["input_ids"], own["attention_mask"])


def test_clip_text_teacher_equals_get_text_features(tiny_clip, tiny_bert):
    t = TextTeacher(tiny_clip, device="cpu", student_tokenizer=tiny_bert, retokenize=True)
    assert (t.kind, t.pooler, t.dim) == ("clip", "projection", 16)
    tok = _ids(tiny_clip, CAPTIONS[:4])
    clip = CLIPModel.from_pretrained(tiny_clip).eval()
    with torch.no_grad():
        want = clip.get_text_features(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"])
    want = want if isinstance(want, torch.Tensor) else want.pooler_output
    out = t.encode(texts=CAPTIONS[:4])
    torch.testing.assert_close(out.emb, want)
    assert out.local.shape == (4, tok["input_ids"].shape[1] - 1, 32)
    with pytest.raises(ValueError, match="does not share the student's vocabulary"):
        TextTeacher(tiny_clip, device="cpu", student_tokenizer=tiny_bert)


def test_ensemble_validates_weights(tiny_bert, bert_b):
    a = TextTeacher(tiny_bert, device="cpu", name="simcse")
    b = TextTeacher(bert_b, device="cpu", name="diffcse")
    ens = TeacherEnsemble([a, b], (0.33, 0.67))
    assert ens.weights == (0.33, 0.67) and ens.columns == ("teacher_simcse", "teacher_diffcse")
    for weights, match in [
        ((1.0,), "2 teachers but 1 weights"),
        ((0.33, 0.0), "finite and > 0"),
        ((0.5, -0.5), "finite and > 0"),
        ((0.5, float("nan")), "finite and > 0"),
    ]:
        with pytest.raises(ValueError, match=match):
            TeacherEnsemble([a, b], weights)
    with pytest.raises(ValueError, match="names must be unique"):
        TeacherEnsemble([a, TextTeacher(bert_b, device="cpu", name="simcse")], (0.5, 0.5))
    # two seeds, two different teachers: per-teacher embeddings come back in order
    tok = _ids(tiny_bert)
    ea, eb = ens.embeddings(tok["input_ids"], tok["attention_mask"])
    torch.testing.assert_close(ea, a.encode_ids(tok["input_ids"], tok["attention_mask"])[0])
    torch.testing.assert_close(eb, b.encode_ids(tok["input_ids"], tok["attention_mask"])[0])
    assert not torch.allclose(ea, eb)
    with pytest.raises(KeyError, match="teacher_diffcse"):
        ens.precomputed({"teacher_simcse": np.zeros((2, 32))})


@pytest.mark.parametrize("which", ["tiny_bert", "tiny_roberta"])
def test_teacher_forward_takes_its_mask_built_ahead(which, request, monkeypatch):
    """The mask goes in as the additive 4-D mask the model would build: Hugging Face's mask
    preparation, whose SDPA path reads ``padding_mask.all()`` back from the device (a host sync
    inside a training step), is never entered, and the outputs are the 2-D mask's."""
    import transformers.masking_utils as mu

    path = request.getfixturevalue(which)
    tok = _ids(path)
    ref = AutoModel.from_pretrained(path).eval()
    with torch.no_grad():
        want = ref(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"]).last_hidden_state

    def refuse(*a, **kw):
        raise AssertionError("the teacher's forward prepared a mask from the 2-D one")

    monkeypatch.setattr(mu, "_ignore_bidirectional_mask_sdpa", refuse)
    monkeypatch.setattr(mu, "sdpa_mask", refuse)
    t = TextTeacher(path, pooler="cls_before_pooler", device="cpu")
    emb, local = t.encode_ids(tok["input_ids"], tok["attention_mask"])
    assert (tok["attention_mask"] == 0).any()  # the batch has padding
    torch.testing.assert_close(emb, want[:, 0])
    torch.testing.assert_close(local, want[:, 1:])


@pytest.mark.parametrize("which", ["tiny_bert", "tiny_clip"])
def test_the_model_is_built_at_its_first_use(which, request, tiny_bert):
    """A teacher whose stored embeddings stand in for it never builds its model: its dimension
    comes from the config; its first forward builds it, on the device it was moved to."""
    path = request.getfixturevalue(which)
    t = TextTeacher(path, device="cpu", student_tokenizer=tiny_bert, retokenize=which == "tiny_clip")
    assert t._model is None and t.dim == (16 if which == "tiny_clip" else 32)
    t.to("cpu")
    assert t._model is None
    tok = _ids(tiny_bert, CAPTIONS[:2])
    out = (t.encode(texts=CAPTIONS[:2]) if which == "tiny_clip"
           else t.encode(tok["input_ids"], tok["attention_mask"]))
    assert t._model is not None and out.emb.shape[1] == t.dim
    assert not any(p.requires_grad for p in t.model.parameters()) and not t.model.training
