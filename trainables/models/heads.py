"""The small trainable heads a method puts on the encoder's [CLS], apart from the encoder itself
(docs/official-code.md §2.1, §4.1, §5.1, §6.1).

- ``mlp``: the SimCSE "pooler", Linear(h, h) + tanh on [CLS], giving z (training only); initialised
  N(0, initializer_range), bias 0, because the official model's ``init_weights`` creates it;
- a method's heads, as it declares them (``trainables.objectives.methods.Head``): the built-in ones
  are ``grounding`` (Linear(h, proj) + tanh + L2-normalise on the [CLS] *before* the MLP -> p1, p2),
  ``image_head`` (the same on the stored image feature -> v; MCSE ``ResNetVisnModel``,
  KDMCSE/DALR ``visn_model.vmlp``), ``clip_text_head`` (on the stored CLIP caption feature -> t;
  KDMCSE ``tmlp``) and DALR's ``text_aligner`` / ``image_aligner`` (Linear -> BatchNorm1d -> ReLU
  -> Linear(., 256) -> BatchNorm1d -> ReLU, on z1 and on the raw, unnormalised image feature).

The heads keep PyTorch's default ``nn.Linear`` init because the official code creates them outside
the ``PreTrainedModel``, and they are built in the order the method declares them.
``trainables.models.student.Student`` puts them on one HF encoder; an array (``trainables.arrays``) gives
every member its own, built from the member's seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from trainables.objectives.methods import TWO_VIEWS, Head, StudentOutputs

BUILTIN_HEADS = ("grounding", "image_head", "clip_text_head", "text_aligner", "image_aligner")
"""the built-in methods' head names: read as None on a module whose method builds none of them"""
RESERVED = ("encoder", "mlp", "config", "tokenizer", "hidden_size", "specs", "device")
"""attributes of the student a head may not be named"""


def tanh_head(d_in: int, d_out: int) -> nn.Sequential:
    """MCSE's ``MLPLayer``: Linear + tanh, PyTorch default init (normalised by the caller)."""
    return nn.Sequential(nn.Linear(d_in, d_out), nn.Tanh())


def simcse_mlp(hidden: int, initializer_range: float = 0.02) -> nn.Sequential:
    """The SimCSE MLP with the official init: N(0, initializer_range), bias 0."""
    mlp = tanh_head(hidden, hidden)
    nn.init.normal_(mlp[0].weight, 0.0, initializer_range)
    nn.init.zeros_(mlp[0].bias)
    return mlp


def aligner(d_in: int, shared: int, d_out: int) -> nn.Sequential:
    """DALR aligner: Linear(d_in, shared) -> BN -> ReLU -> Linear(shared, d_out) -> BN -> ReLU
    (d_out is the method's to declare: DALR's 256, ``objectives.dalr.ALIGN_DIM``).

    The official code has shared_dim = 768 = h = CLIP ViT-L/14 dim for both aligners; for other
    dims the image aligner maps image_dim -> h so both branches share the same hidden width.
    """
    return nn.Sequential(
        nn.Linear(d_in, shared), nn.BatchNorm1d(shared), nn.ReLU(),
        nn.Linear(shared, d_out), nn.BatchNorm1d(d_out), nn.ReLU(),
    )


def build_head(h: Head) -> nn.Module:
    """The module of a resolved head (``trainables.objectives.methods.resolve_heads``)."""
    if h.kind == "tanh":
        return tanh_head(h.in_dim, h.out_dim)
    if h.kind == "linear":
        return nn.Linear(h.in_dim, h.out_dim)
    return aligner(h.in_dim, h.width, h.out_dim)


class MethodHeads(nn.Module):
    """The heads one method declares (all but the encoder and the MLP), built in their order."""

    def __init__(self, heads: Sequence[tuple[str, Head]]):
        super().__init__()
        for name in BUILTIN_HEADS:
            setattr(self, name, None)
        self.specs = tuple(heads)
        for name, h in self.specs:
            setattr(self, name, build_head(h))

    @staticmethod
    def _check_feature(name: str, x: torch.Tensor, dim: int, bs: int, field: str) -> None:
        if x.dim() != 2 or x.shape[0] != bs or x.shape[1] != dim:
            raise ValueError(
                f"{name} feature has shape {tuple(x.shape)} but the student expects ({bs}, {dim}) "
                f"(StudentConfig.{field}={dim}); build the Student with {field}={x.shape[-1]} "
                "to match the feature store, or pass the right store column"
            )

    def forward(self, *args, **kwargs) -> StudentOutputs:
        """``heads_outputs``: what ``torch.func.functional_call`` calls when an array runs the
        heads of a method's members with their weights stacked (``trainables.arrays.batched``)."""
        return self.heads_outputs(*args, **kwargs)

    def heads_outputs(self, cls: torch.Tensor, z: torch.Tensor, attention_mask: torch.Tensor,
                      image: torch.Tensor | None = None,
                      clip_text: torch.Tensor | None = None) -> StudentOutputs:
        """``cls``, ``z``: (bs, 2, h), the two dropout views of [CLS] before and after the MLP.
        ``image`` marks a caption batch; heads declared for caption batches run only then."""
        bs = cls.shape[0]
        out = StudentOutputs(z1=z[:, 0], z2=z[:, 1], cls1=cls[:, 0], cls2=cls[:, 1],
                             attention_mask=attention_mask)
        caption = image is not None
        feats: dict[str, torch.Tensor | None] = {"cls": cls, "z": z, "z1": out.z1}
        for name, h in self.specs:
            if h.batches == "caption" and not caption:
                continue
            if h.input not in feats:  # a stored feature: checked once, cast to the student's dtype
                raw = image if h.input == "image" else clip_text
                if raw is not None:
                    field = "image_dim" if h.input == "image" else "clip_text_dim"
                    self._check_feature(h.input, raw, h.in_dim, bs, field)
                    raw = raw.to(z.dtype)  # stored CLIP features may be fp16
                feats[h.input] = raw
            x = feats[h.input]
            if x is None:  # e.g. no clip_text column: the loss that needs it says so
                continue
            if h.kind == "aligner" and self.training and bs < 2:
                raise ValueError(f"head {name!r} uses BatchNorm in train mode: a pair batch needs "
                                 ">= 2 rows")
            y = getattr(self, name)(x)
            if h.kind == "aligner" and self.training:
                # The official DALR runs its ConsistencySimilarityModule twice a caption step (on
                # the matched and on the rolled images), so each aligner's BatchNorm running
                # statistics take two updates of the same batch statistics (rolling the rows
                # leaves them unchanged). Outputs and gradients come from the first call alone.
                with torch.no_grad():
                    getattr(self, name)(x)
            if h.normalize:
                y = F.normalize(y, dim=-1)
            if not h.into:
                out.extra = {**(out.extra or {}), name: y}
            elif h.input in TWO_VIEWS:
                setattr(out, h.into[0], y[:, 0])
                setattr(out, h.into[1], y[:, 1])
            else:
                setattr(out, h.into[0], y)
        return out
