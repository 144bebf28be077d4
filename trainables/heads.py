"""The small trainable heads each method puts on the encoder's [CLS], apart from the encoder itself
(docs/official-code.md §2.1, §4.1, §5.1, §6.1).

- ``mlp``: the SimCSE "pooler", Linear(h, h) + tanh on [CLS], giving z (training only); initialised
  N(0, initializer_range), bias 0, because the official model's ``init_weights`` creates it;
- ``grounding``: Linear(h, proj) + tanh + L2-normalise on the [CLS] *before* the MLP -> p1, p2;
- ``image_head``: the same on the stored image feature -> v (MCSE ``ResNetVisnModel``,
  KDMCSE/DALR ``visn_model.vmlp``);
- ``clip_text_head``: the same on the stored CLIP caption feature -> t (KDMCSE ``tmlp``);
- ``text_aligner`` / ``image_aligner``: DALR's consistency aligners, Linear -> BatchNorm1d -> ReLU ->
  Linear(., 256) -> BatchNorm1d -> ReLU, on z1 and on the raw, unnormalised image feature.

The method heads keep PyTorch's default ``nn.Linear`` init because the official code creates them
outside the ``PreTrainedModel``. ``trainables.model.Student`` puts these heads on one HF encoder;
an array (``trainables.arrays``) gives every member its own, built from the member's seed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainables.objectives import StudentOutputs

ALIGN_DIM = 256
"""DALR consistency module's ``sim_dim``: fixed at 256 in the code, independent of proj_dim."""


def tanh_head(d_in: int, d_out: int) -> nn.Sequential:
    """MCSE's ``MLPLayer``: Linear + tanh, PyTorch default init (normalised by the caller)."""
    return nn.Sequential(nn.Linear(d_in, d_out), nn.Tanh())


def simcse_mlp(hidden: int, initializer_range: float = 0.02) -> nn.Sequential:
    """The SimCSE MLP with the official init: N(0, initializer_range), bias 0."""
    mlp = tanh_head(hidden, hidden)
    nn.init.normal_(mlp[0].weight, 0.0, initializer_range)
    nn.init.zeros_(mlp[0].bias)
    return mlp


def aligner(d_in: int, shared: int) -> nn.Sequential:
    """DALR aligner: Linear(d_in, shared) -> BN -> ReLU -> Linear(shared, 256) -> BN -> ReLU.

    The official code has shared_dim = 768 = h = CLIP ViT-L/14 dim for both aligners; for other
    dims the image aligner maps image_dim -> h so both branches share the same hidden width.
    """
    return nn.Sequential(
        nn.Linear(d_in, shared), nn.BatchNorm1d(shared), nn.ReLU(),
        nn.Linear(shared, ALIGN_DIM), nn.BatchNorm1d(ALIGN_DIM), nn.ReLU(),
    )


class MethodHeads(nn.Module):
    """The heads of one method (all but the encoder and the MLP); only those it uses are built."""

    def __init__(self, method: str, hidden: int, proj_dim: int, image_dim: int | None,
                 text_head_dim: int | None):
        super().__init__()
        self.method, self.image_dim, self.text_head_dim = method, image_dim, text_head_dim
        self.grounding = self.image_head = self.clip_text_head = None
        self.text_aligner = self.image_aligner = None
        if method != "simcse":
            self.grounding = tanh_head(hidden, proj_dim)
            self.image_head = tanh_head(image_dim, proj_dim)
        if text_head_dim is not None:
            self.clip_text_head = tanh_head(text_head_dim, proj_dim)
        if method == "dalr":
            self.text_aligner = aligner(hidden, hidden)
            self.image_aligner = aligner(image_dim, hidden)

    @staticmethod
    def _check_feature(name: str, x: torch.Tensor, dim: int, bs: int, field: str) -> None:
        if x.dim() != 2 or x.shape[0] != bs or x.shape[1] != dim:
            raise ValueError(
                f"{name} feature has shape {tuple(x.shape)} but the student expects ({bs}, {dim}) "
                f"(StudentConfig.{field}={dim}); build the Student with {field}={x.shape[-1]} "
                "to match the feature store, or pass the right store column"
            )

    def heads_outputs(self, cls: torch.Tensor, z: torch.Tensor, attention_mask: torch.Tensor,
                      image: torch.Tensor | None = None,
                      clip_text: torch.Tensor | None = None) -> StudentOutputs:
        """``cls``, ``z``: (bs, 2, h), the two dropout views of [CLS] before and after the MLP."""
        bs = cls.shape[0]
        out = StudentOutputs(z1=z[:, 0], z2=z[:, 1], cls1=cls[:, 0], cls2=cls[:, 1],
                             attention_mask=attention_mask)
        if image is None or self.image_head is None:
            return out
        self._check_feature("image", image, self.image_dim, bs, "image_dim")
        image = image.to(z.dtype)  # stored CLIP features may be fp16
        p = F.normalize(self.grounding(cls), dim=-1)
        out.p1, out.p2 = p[:, 0], p[:, 1]
        out.v = F.normalize(self.image_head(image), dim=-1)
        if self.clip_text_head is not None and clip_text is not None:
            self._check_feature("clip_text", clip_text, self.text_head_dim, bs, "clip_text_dim")
            out.t = F.normalize(self.clip_text_head(clip_text.to(z.dtype)), dim=-1)
        if self.text_aligner is not None:
            if self.training and bs < 2:
                raise ValueError("DALR's aligners use BatchNorm in train mode: a pair batch needs >= 2 rows")
            out.text_aligned = self.text_aligner(out.z1)
            out.image_aligned = self.image_aligner(image)  # raw feature, as DALR feeds batch['img']
        return out
