"""``hf_layout.read_weights`` reads what ``AutoModel.from_pretrained`` loads, tensor for tensor, from
a folder's safetensors files (bare keys, a head model's prefixed keys, shards, half precision), and
says None wherever transformers would do something else (no safetensors, a key it would initialise,
a hub name); the stacked encoder then loads through transformers, as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel

from trainables.arrays.encoder import StackedEncoder
from trainables.arrays.hf_layout import expected_shapes, read_weights

ROOT = Path(__file__).resolve().parents[3]


def reference(folder: Path) -> dict[str, torch.Tensor]:
    return AutoModel.from_pretrained(folder, dtype=torch.float32).state_dict()


def assert_same(got: dict[str, torch.Tensor] | None, folder: Path, ref: dict | None = None) -> None:
    assert got is not None
    ref = reference(folder) if ref is None else ref
    assert set(got) == set(expected_shapes(AutoConfig.from_pretrained(folder)))
    for k, t in got.items():
        assert t.dtype == torch.float32 and torch.equal(t, ref[k]), k


@pytest.mark.parametrize("model", ["tiny_bert", "tiny_roberta"])
def test_the_tensors_transformers_loads(model, request):
    folder = request.getfixturevalue(model)
    assert_same(read_weights(folder, AutoConfig.from_pretrained(folder)), folder)


def test_a_head_model_s_prefixed_keys_and_shards(tiny_bert, tmp_path):
    from transformers import BertForMaskedLM

    mlm = BertForMaskedLM.from_pretrained(tiny_bert)
    mlm.save_pretrained(tmp_path, max_shard_size="20KB")  # bert.* keys and cls.* heads, sharded
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert any(k.startswith("bert.") for f in tmp_path.glob("*.safetensors") for k in load_file(f))
    assert_same(read_weights(tmp_path, AutoConfig.from_pretrained(tmp_path)), tmp_path)


def test_half_precision_is_cast_as_transformers_casts_it(tiny_bert, tmp_path):
    AutoModel.from_pretrained(tiny_bert, dtype=torch.float16).save_pretrained(tmp_path)
    got = read_weights(tmp_path, AutoConfig.from_pretrained(tmp_path))
    assert_same(got, tmp_path)
    assert not torch.equal(got["embeddings.word_embeddings.weight"],
                           reference(tiny_bert)["embeddings.word_embeddings.weight"])  # it is fp16's


def test_none_where_transformers_would_do_something_else(tiny_bert, tmp_path):
    cfg = AutoConfig.from_pretrained(tiny_bert)
    assert read_weights("bert-base-uncased", cfg) is None  # a hub name
    assert read_weights(tmp_path / "absent", cfg) is None
    # a tensor missing: transformers would initialise it at random
    short = tmp_path / "short"
    short.mkdir()
    for f in ("config.json",):
        (short / f).write_bytes((tiny_bert / f).read_bytes())
    tensors = load_file(tiny_bert / "model.safetensors")
    tensors.pop("encoder.layer.0.output.dense.bias")
    save_file(tensors, short / "model.safetensors", metadata={"format": "pt"})
    assert read_weights(short, cfg) is None
    # weights only as pytorch_model.bin: not read here
    binary = tmp_path / "bin"
    binary.mkdir()
    (binary / "config.json").write_bytes((tiny_bert / "config.json").read_bytes())
    torch.save(load_file(tiny_bert / "model.safetensors"), binary / "pytorch_model.bin")
    assert read_weights(binary, cfg) is None


def test_the_stacked_encoder_falls_back_to_transformers(tiny_bert, tmp_path):
    """Weights only in pytorch_model.bin: StackedEncoder.from_pretrained loads them through
    transformers, the same tensors as from the safetensors file."""
    binary = tmp_path / "bin"
    binary.mkdir()
    for f in tiny_bert.iterdir():
        if f.name != "model.safetensors":
            (binary / f.name).write_bytes(f.read_bytes())
    torch.save(load_file(tiny_bert / "model.safetensors"), binary / "pytorch_model.bin")
    a, b = StackedEncoder.from_pretrained(tiny_bert, 2), StackedEncoder.from_pretrained(binary, 2)
    for (ka, pa), (kb, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert ka == kb and torch.equal(pa, pb), ka


def test_loading_a_student_does_not_import_transformers_modeling(tiny_bert):
    """The point of it: an array's start without BERT's modeling code (nor the Dynamo import
    that comes with it)."""
    code = ("import sys\n"
            "from trainables.arrays.encoder import StackedEncoder\n"
            f"e = StackedEncoder.from_pretrained({str(tiny_bert)!r}, 3)\n"
            "print(e.n_members, sorted(m for m in sys.modules if m.endswith('modeling_bert')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "3 []"
