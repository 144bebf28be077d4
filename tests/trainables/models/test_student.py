"""Student model: module sets per method, two-view forward, heads, encode, save/load, errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from trainables.models.student import HEADS_FILE, Student, StudentConfig

SENTS = [
    "a man rides a horse on the beach",
    "two dogs",
    "the young girl in a red dress plays with a ball in the park near the street",
    "a cat sits",
    "people walk",
]
IMG, TXT = 12, 10  # small stand-ins for the stored image / CLIP-text feature dims


def make(path: Path, method: str = "mcse", **kw) -> Student:
    torch.manual_seed(0)
    image_dim = None if method == "simcse" else IMG
    return Student(StudentConfig(encoder=str(path), method=method, proj_dim=8,
                                 image_dim=image_dim, **kw))


def batch(student: Student, sents=SENTS):
    tok = student.tokenizer(sents, padding=True, return_tensors="pt")
    return tok["input_ids"], tok["attention_mask"]


def reference_cls(path: Path, sents) -> torch.Tensor:
    """Independent reference: a fresh AutoModel in eval mode, [CLS] of the last layer, no token types."""
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    enc = tok(sents, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state[:, 0]


EXPECTED_MODULES = {
    "simcse": set(),
    "mcse": {"grounding", "image_head"},
    "kdmcse": {"grounding", "image_head", "clip_text_head"},
    "dalr": {"grounding", "image_head", "text_aligner", "image_aligner"},
}


@pytest.mark.parametrize("method", sorted(EXPECTED_MODULES))
def test_module_set_per_method(tiny_bert, method):
    s = make(tiny_bert, method)
    children = {name for name, _ in s.named_children()}
    assert children == {"encoder", "mlp"} | EXPECTED_MODULES[method]
    h = 32
    if method != "simcse":
        assert (s.grounding[0].in_features, s.grounding[0].out_features) == (h, 8)
        assert (s.image_head[0].in_features, s.image_head[0].out_features) == (IMG, 8)
    if method == "kdmcse":  # no clip_text_dim given: CLIP's shared dim = image_dim
        assert s.clip_text_head[0].in_features == IMG
    if method == "dalr":
        layers = [type(m).__name__ for m in s.image_aligner]
        assert layers == ["Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d", "ReLU"]
        assert s.image_aligner[0].in_features == IMG and s.text_aligner[0].in_features == h
        assert s.text_aligner[3].out_features == 256 and s.image_aligner[3].out_features == 256


def test_mcse_clip_text_head_only_when_given(tiny_bert):
    assert make(tiny_bert, "mcse").clip_text_head is None
    assert make(tiny_bert, "mcse", clip_text_dim=TXT).clip_text_head[0].in_features == TXT
    assert make(tiny_bert, "dalr", clip_text_dim=TXT).clip_text_head is None


def test_config_validation():
    with pytest.raises(ValueError, match="method='moco' is unknown"):
        StudentConfig(method="moco")
    with pytest.raises(ValueError, match="needs StudentConfig.image_dim"):
        StudentConfig(method="mcse")
    with pytest.raises(ValueError, match="hidden_dropout=1.5"):
        StudentConfig(method="simcse", hidden_dropout=1.5)


def test_forward_shapes_and_normalisation(tiny_bert):
    s = make(tiny_bert, "dalr").train()
    ids, mask = batch(s)
    bs = ids.shape[0]
    image = torch.randn(bs, IMG) * 5
    out = s(ids, mask, image=image)
    for name in ("z1", "z2", "cls1", "cls2"):
        assert getattr(out, name).shape == (bs, 32)
    for name in ("p1", "p2", "v"):
        t = getattr(out, name)
        assert t.shape == (bs, 8)
        torch.testing.assert_close(t.norm(dim=-1), torch.ones(bs))
    assert out.text_aligned.shape == out.image_aligned.shape == (bs, 256)
    assert (out.text_aligned >= 0).all() and (out.image_aligned >= 0).all()  # final ReLU
    assert out.t is None  # dalr has no CLIP-text head
    assert torch.equal(out.attention_mask, mask)
    # Heads by hand: z = tanh(W cls + b); p = normalise(tanh(G cls + c)); v likewise on the raw image.
    w, b = s.mlp[0].weight, s.mlp[0].bias
    torch.testing.assert_close(out.z1, torch.tanh(out.cls1 @ w.T + b))
    g = torch.tanh(out.cls2 @ s.grounding[0].weight.T + s.grounding[0].bias)
    torch.testing.assert_close(out.p2, g / g.norm(dim=-1, keepdim=True))
    v = torch.tanh(image @ s.image_head[0].weight.T + s.image_head[0].bias)
    torch.testing.assert_close(out.v, v / v.norm(dim=-1, keepdim=True))
    # Aligner in train mode: BN with batch statistics (biased variance) on the raw image.
    a = image @ s.image_aligner[0].weight.T + s.image_aligner[0].bias
    a = torch.relu((a - a.mean(0)) / torch.sqrt(a.var(0, unbiased=False) + 1e-5))
    a = a @ s.image_aligner[3].weight.T + s.image_aligner[3].bias
    a = torch.relu((a - a.mean(0)) / torch.sqrt(a.var(0, unbiased=False) + 1e-5))
    torch.testing.assert_close(out.image_aligned, a, atol=1e-5, rtol=1e-4)


def test_kdmcse_clip_text_and_text_only_batch(tiny_bert):
    s = make(tiny_bert, "kdmcse", clip_text_dim=TXT)
    ids, mask = batch(s)
    out = s(ids, mask, image=torch.randn(len(SENTS), IMG), clip_text=torch.randn(len(SENTS), TXT).half())
    assert out.t.shape == (len(SENTS), 8) and out.t.dtype == torch.float32
    torch.testing.assert_close(out.t.norm(dim=-1), torch.ones(len(SENTS)))
    text_only = s(ids, mask)
    assert text_only.p1 is None and text_only.v is None and text_only.t is None


@pytest.mark.parametrize("fixture", ["tiny_bert", "tiny_roberta"])
def test_views_differ_in_train_and_agree_in_eval(fixture, request):
    path = request.getfixturevalue(fixture)
    s = make(path, "simcse")
    ids, mask = batch(s)
    out = s.train()(ids, mask)
    assert not torch.allclose(out.cls1, out.cls2)
    out = s.eval()(ids, mask)
    torch.testing.assert_close(out.cls1, out.cls2)
    # eval [CLS] equals an independently loaded encoder's [CLS] (no token_type_ids).
    torch.testing.assert_close(out.cls1, reference_cls(path, SENTS), atol=1e-5, rtol=1e-5)
    # an already repeated (bs, 2, L) batch gives the same result
    out3 = s(torch.stack([ids, ids], 1), torch.stack([mask, mask], 1))
    torch.testing.assert_close(out3.z1, out.z1)
    assert out3.attention_mask.shape == mask.shape


def test_dropout_override_zero_makes_views_equal(tiny_bert):
    s = make(tiny_bert, "simcse", hidden_dropout=0.0, attention_dropout=0.0).train()
    out = s(*batch(s))
    torch.testing.assert_close(out.z1, out.z2)


def test_mlp_init_normal_and_heads_default_init(tmp_path):
    from trainables.testing import make_tiny_bert

    path = make_tiny_bert(tmp_path / "wide", hidden=128, layers=1)
    s = make(path, "mcse")
    w = s.mlp[0].weight  # 16384 samples of N(0, 0.02): sample std within ~1 %
    assert abs(w.std().item() - 0.02) < 0.0015 and abs(w.mean().item()) < 0.001
    assert torch.count_nonzero(s.mlp[0].bias) == 0
    # PyTorch default: kaiming_uniform(a=sqrt 5) -> U(+-1/sqrt(fan_in)), bias U(+-1/sqrt(fan_in)).
    for lin, fan_in in ((s.grounding[0], 128), (s.image_head[0], IMG)):
        bound = 1 / math.sqrt(fan_in)
        assert lin.weight.abs().max() <= bound and lin.bias.abs().max() <= bound
        assert abs(lin.weight.std().item() - bound / math.sqrt(3)) < 0.15 * bound
        assert torch.count_nonzero(lin.bias) > 0


def test_encode_is_cls_before_mlp_and_restores_mode(tiny_bert):
    s = make(tiny_bert, "mcse").train()
    emb = s.encode(SENTS, batch_size=2)  # several batches, sorted by length internally
    assert s.training and s.encoder.training
    assert emb.shape == (len(SENTS), 32) and emb.device.type == "cpu"
    torch.testing.assert_close(emb, reference_cls(tiny_bert, SENTS), atol=1e-5, rtol=1e-5)
    ids, mask = batch(s)
    torch.testing.assert_close(s.encode_ids(ids, mask), emb, atol=1e-5, rtol=1e-5)
    assert s.training
    # no truncation by default; an explicit max_length truncates
    short = s.encode(SENTS[2:3], max_length=4)
    assert not torch.allclose(short, emb[2:3])
    assert s.encode([]).shape == (0, 32)
    with pytest.raises(TypeError, match="list of sentences"):
        s.encode("one sentence")


def test_trainable_parameters_cover_what_gets_gradients(tiny_bert):
    s = make(tiny_bert, "dalr", clip_text_dim=TXT).train()
    names = dict(s.named_trainable_parameters())
    assert not any(n.startswith("encoder.pooler") for n in names)
    assert not any(p.requires_grad for p in s.encoder.pooler.parameters())
    assert any(n.startswith("text_aligner") for n in names)
    ids, mask = batch(s)
    out = s(ids, mask, image=torch.randn(len(SENTS), IMG))
    sum(x.sum() for x in (out.z1, out.z2, out.p1, out.v, out.text_aligned, out.image_aligned)).backward()
    for n, p in names.items():
        assert p.grad is not None, n


@pytest.mark.parametrize("fixture", ["tiny_bert", "tiny_roberta"])
def test_save_load_round_trip(fixture, request, tmp_path):
    from sentence_transformers import SentenceTransformer

    s = make(request.getfixturevalue(fixture), "kdmcse", clip_text_dim=TXT)
    # Perturb the MLP + heads so a silent re-init on load would be caught.
    with torch.no_grad():
        for p in s.heads_state_dict().values():
            p.add_(0.01)
    out = tmp_path / "best"
    s.save_pretrained(out)
    s.save_pretrained(out)  # overwriting an existing folder works and leaves no temp dirs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
    assert json.loads((out / "1_Pooling" / "config.json").read_text())["pooling_mode_cls_token"]
    want = s.encode(SENTS)
    torch.testing.assert_close(reference_cls(out, SENTS), want, atol=1e-5, rtol=1e-5)
    st = SentenceTransformer(str(out), device="cpu")
    got = st.encode(SENTS, convert_to_tensor=True, batch_size=2)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    back = Student.from_pretrained(out)
    assert back.config.method == "kdmcse" and back.clip_text_head is not None
    for k, v in s.heads_state_dict().items():
        torch.testing.assert_close(back.heads_state_dict()[k], v)
    ids, mask = batch(s)
    img, txt = torch.randn(len(SENTS), IMG), torch.randn(len(SENTS), TXT)
    a, b = s.eval()(ids, mask, img, txt), back.eval()(ids, mask, img, txt)
    for name in ("z1", "p1", "v", "t"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), atol=1e-5, rtol=1e-5)


def test_dalr_batchnorm_stats_survive_reload(tiny_bert, tmp_path):
    s = make(tiny_bert, "dalr").train()
    ids, mask = batch(s)
    img = torch.randn(len(SENTS), IMG)
    s(ids, mask, img)  # updates BN running stats
    s.save_pretrained(tmp_path / "d")
    fresh = make(tiny_bert, "dalr")
    fresh.load_heads(tmp_path / "d" / HEADS_FILE)
    torch.testing.assert_close(fresh.image_aligner[1].running_mean, s.image_aligner[1].running_mean)
    # two updates a caption forward, as the official code (its consistency module runs twice)
    assert fresh.image_aligner[1].num_batches_tracked.item() == 2


def test_loading_errors(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="not in the local cache and the hub is offline"):
        Student(StudentConfig(encoder="no-such-org/no-such-model-xyz", method="simcse"))
    with pytest.raises(OSError, match="does not exist"):
        Student(StudentConfig(encoder=str(tmp_path / "missing"), method="simcse"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(OSError, match="has no config.json"):
        Student(StudentConfig(encoder=str(tmp_path / "empty"), method="simcse"))
    s = make(tiny_bert, "mcse")
    with pytest.raises(FileNotFoundError, match="no student heads file"):
        s.load_heads(tmp_path / "empty")
    s.save_pretrained(tmp_path / "m")
    with pytest.raises(ValueError, match="heads do not fit this 'dalr' student"):
        make(tiny_bert, "dalr").load_heads(tmp_path / "m")


def test_feature_dim_mismatch_names_both_dims(tiny_bert):
    s = make(tiny_bert, "kdmcse", clip_text_dim=TXT)
    ids, mask = batch(s)
    with pytest.raises(ValueError, match=r"shape \(5, 768\).*\(5, 12\).*image_dim=768"):
        s(ids, mask, image=torch.randn(len(SENTS), 768))
    with pytest.raises(ValueError, match="clip_text_dim=10"):
        s(ids, mask, image=torch.randn(len(SENTS), IMG), clip_text=torch.randn(len(SENTS), 3))


def test_minilm_two_views_and_round_trip(minilm, tmp_path):
    from sentence_transformers import SentenceTransformer

    s = Student(StudentConfig(encoder=str(minilm), method="mcse", image_dim=IMG)).train()
    ids, mask = batch(s, SENTS[:3])
    out = s(ids, mask, image=torch.randn(3, IMG))
    assert out.z1.shape == (3, 384) and out.p1.shape == (3, 256)
    assert not torch.allclose(out.cls1, out.cls2)
    s.save_pretrained(tmp_path / "mini")
    want = s.encode(SENTS)
    got = SentenceTransformer(str(tmp_path / "mini"), device="cpu").encode(SENTS, convert_to_tensor=True)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    back = Student.from_pretrained(tmp_path / "mini")
    torch.testing.assert_close(back.encode(SENTS), want, atol=1e-5, rtol=1e-5)
