"""What a Hugging Face BERT/RoBERTa checkpoint must look like for the stacked encoder.

``check_config`` refuses what the hand-written forward does not reproduce, each with one line
naming the setting and the fix; ``stacked_unsupported`` names the architectures among those
(the trainer loops over Hugging Face models for them instead, ``looped.py``).
``expected_shapes`` lists the ``BertModel``/``RobertaModel`` state-dict keys the forward reads
(the pooler is never read: the official code never uses it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
import torch.nn.functional as F

SUPPORTED_MODEL_TYPES = ("bert", "roberta")
IGNORED_PREFIXES = ("pooler.",)


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    # transformers' NewGELUActivation, written out so the tanh form matches it bit for bit.
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": _gelu_new,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


def stacked_unsupported(cfg) -> str | None:
    """Why the stacked forward cannot express this architecture (None: it can). What it names is
    not an error: such an encoder trains through the looped fallback (``looped.py``)."""
    if cfg.model_type not in SUPPORTED_MODEL_TYPES:
        return (f"model_type={cfg.model_type!r} is not supported by StackedEncoder, which "
                f"implements {' and '.join(SUPPORTED_MODEL_TYPES)}")
    pos = getattr(cfg, "position_embedding_type", "absolute")
    if pos != "absolute":
        return (f"position_embedding_type={pos!r} is not supported by StackedEncoder, which "
                "implements absolute position embeddings")
    act = cfg.hidden_act
    if not isinstance(act, str) or act not in ACTIVATIONS:
        return (f"hidden_act={act!r} is not supported by StackedEncoder, which implements "
                f"{', '.join(ACTIVATIONS)}")
    return None


def check_config(cfg) -> None:
    """One-line ``ValueError`` for any setting the stacked forward does not implement."""
    why = stacked_unsupported(cfg)
    if why is not None:
        raise ValueError(f"{why}; pass such a checkpoint, or use trainables.arrays.looped."
                         "build_encoder, which trains any other encoder as a LoopedEncoder")
    if getattr(cfg, "is_decoder", False) or getattr(cfg, "add_cross_attention", False):
        raise ValueError("is_decoder/add_cross_attention=True is not supported by StackedEncoder; "
                         "set both to False (sentence encoders are bidirectional)")
    if cfg.hidden_size % cfg.num_attention_heads:
        raise ValueError(f"hidden_size={cfg.hidden_size} is not a multiple of num_attention_heads="
                         f"{cfg.num_attention_heads}; fix the config")
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        p = getattr(cfg, name)
        if not 0.0 <= p < 1.0:
            raise ValueError(f"{name}={p} must lie in [0, 1); fix the config or the override")


def expected_shapes(cfg) -> dict[str, tuple[int, ...]]:
    """HF state-dict key -> shape of every tensor the forward reads, in forward order."""
    h, inter = cfg.hidden_size, cfg.intermediate_size
    shapes = {
        "embeddings.word_embeddings.weight": (cfg.vocab_size, h),
        "embeddings.position_embeddings.weight": (cfg.max_position_embeddings, h),
        "embeddings.token_type_embeddings.weight": (cfg.type_vocab_size, h),
        "embeddings.LayerNorm.weight": (h,),
        "embeddings.LayerNorm.bias": (h,),
    }
    per_layer = {
        "attention.self.query.weight": (h, h), "attention.self.query.bias": (h,),
        "attention.self.key.weight": (h, h), "attention.self.key.bias": (h,),
        "attention.self.value.weight": (h, h), "attention.self.value.bias": (h,),
        "attention.output.dense.weight": (h, h), "attention.output.dense.bias": (h,),
        "attention.output.LayerNorm.weight": (h,), "attention.output.LayerNorm.bias": (h,),
        "intermediate.dense.weight": (inter, h), "intermediate.dense.bias": (inter,),
        "output.dense.weight": (h, inter), "output.dense.bias": (h,),
        "output.LayerNorm.weight": (h,), "output.LayerNorm.bias": (h,),
    }
    for layer in range(cfg.num_hidden_layers):
        shapes.update({f"encoder.layer.{layer}.{k}": s for k, s in per_layer.items()})
    return shapes


def check_state_dict(state: Mapping[str, torch.Tensor], shapes: Mapping[str, tuple[int, ...]],
                     what: str) -> None:
    """Keys and shapes as ``expected_shapes``; pooler keys are allowed and ignored."""
    missing = [k for k in shapes if k not in state]
    extra = [k for k in state if k not in shapes and not k.startswith(IGNORED_PREFIXES)]
    if missing or extra:
        raise ValueError(f"{what}: missing keys {missing[:3]}, unexpected keys {extra[:3]}; pass a "
                         "BertModel/RobertaModel.state_dict() of the config's architecture")
    for k, shape in shapes.items():
        if tuple(state[k].shape) != shape:
            raise ValueError(f"{what}: {k} has shape {tuple(state[k].shape)}, the config needs {shape}; "
                             "pass a state dict of the config's architecture")


SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
"""the weight files ``save_pretrained`` writes: one file, or the index of its shards"""


def read_weights(source: str | os.PathLike, cfg) -> dict[str, torch.Tensor] | None:
    """The tensors ``expected_shapes(cfg)`` names, read straight from a local folder's
    safetensors files (``model.safetensors``, or the shards its index names), in float32; None
    where that would not be what ``AutoModel.from_pretrained(source, dtype=torch.float32)``
    loads: no such folder or file (a hub name, ``pytorch_model.bin``), a key missing (transformers
    would initialise it at random, or rename an old one), a shape off, a tensor not floating.

    Why not transformers: building its ``BertModel`` to read a state dict imports its modeling
    code (torch.distributed.tensor, and Dynamo with it): 3-4 CPU s in every array, before its
    first step. The keys are the base model's, bare or under its prefix (``bert.``, ``roberta.``,
    as a model with a head saves them), as transformers accepts them; values are cast as it
    casts them (a float16 or bfloat16 file to float32 exactly)."""
    import json

    folder = Path(source)
    if not folder.is_dir():
        return None
    index = folder / SAFETENSORS_INDEX
    try:
        if (folder / SAFETENSORS).is_file():
            files = [folder / SAFETENSORS]
        elif index.is_file():
            files = [folder / f for f in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
        else:
            return None
        from safetensors import safe_open

        shapes = expected_shapes(cfg)
        prefix = f"{cfg.model_type}."
        out: dict[str, torch.Tensor] = {}
        for path in files:
            with safe_open(str(path), framework="pt") as f:
                names = set(f.keys())
                for key in shapes:
                    name = key if key in names else prefix + key if prefix + key in names else None
                    if name is not None and key not in out:
                        out[key] = f.get_tensor(name)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if set(out) != set(shapes):
        return None
    for key, t in out.items():
        if tuple(t.shape) != shapes[key] or not t.is_floating_point():
            return None
        out[key] = t.to(torch.float32)
    return out
