"""A member-batched BERT/RoBERTa encoder: M independent members in one forward/backward.

Every HF parameter is stored stacked as one ``nn.Parameter`` of shape (M, *hf_shape), named after
its state-dict key with '.' -> '__'. The forward reproduces transformers' ``BertModel`` /
``RobertaModel`` ``last_hidden_state`` (absolute positions, token_type_ids all 0 as the official
training code passes none) with matmuls batched over the member axis, so member i's output depends
only on its parameters, its rows and, with dropout, its own generator (``dropout.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from trainables.arrays import dropout
from trainables.arrays.hf_layout import (
    ACTIVATIONS,
    check_config,
    check_state_dict,
    expected_shapes,
    read_weights,
)


def _name(key: str) -> str:
    return key.replace(".", "__")


class _BatchedLinear(torch.autograd.Function):
    """``baddbmm(b, x, w^T)`` whose weight gradient comes out in the weight's own layout.

    Autograd's baddbmm backward gives the gradient of ``w^T`` and transposes it, and autograd
    then copies that transposed gradient into the weight's layout: one copy of every weight
    gradient a step (73 kernels at BERT-base depth, and their memory traffic). Here it is
    ``g^T x``, laid out as the weight. Under autocast the inputs are cast as autocast casts
    them for baddbmm, and the cast copies are what the backward reads, as autocast's own.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        dev = x.device.type
        if torch.is_autocast_enabled(dev):
            dt = torch.get_autocast_dtype(dev)
            x, w, b = x.to(dt), w.to(dt), b.to(dt)
        with torch.autocast(dev, enabled=False):
            out = torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))
        ctx.save_for_backward(x, w)
        return out

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, w = ctx.saved_tensors
        g = g.to(x.dtype)
        gx = torch.bmm(g, w) if ctx.needs_input_grad[0] else None
        gw = torch.bmm(g.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        gb = g.sum(1) if ctx.needs_input_grad[2] else None
        return gx, gw, gb


def batched_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-member ``nn.Linear``: x (M, T, in), w (M, out, in), b (M, out) -> (M, T, out)."""
    return _BatchedLinear.apply(x, w, b)


def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm over the last dim with per-member affine w, b of shape (M, H)."""
    shape = (w.shape[0],) + (1,) * (x.dim() - 2) + (w.shape[1],)
    return torch.addcmul(b.view(shape), F.layer_norm(x, x.shape[-1:], eps=eps), w.view(shape))


def _gather(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Rows of per-member tables (M, V, H) at ids (M, N, L), or at shared ids (N, L), -> (M, N, L, H)."""
    m, v, h = table.shape
    if ids.dim() == 2:  # shared rows: one gather per member, no M-fold copy of the ids
        return table.index_select(1, ids.reshape(-1)).view(m, *ids.shape, h)
    offsets = torch.arange(m, device=ids.device).mul_(v).view(m, 1, 1)
    return F.embedding(ids + offsets, table.reshape(m * v, h))


def check_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor, n_members: int,
                 max_length: int) -> tuple[int, int]:
    """An array's batch is (M, N, L) or (N, L), its mask the same shape, within the position
    table. -> (N, L). Shared by the stacked and the looped encoder."""
    if input_ids.dim() not in (2, 3) or attention_mask.shape != input_ids.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask "
                         f"{tuple(attention_mask.shape)} must both be (M, N, L) or (N, L)")
    if input_ids.dim() == 3 and input_ids.shape[0] != n_members:
        raise ValueError(f"input_ids has {input_ids.shape[0]} member blocks, the array has "
                         f"{n_members}")
    n, length = input_ids.shape[-2:]
    if length > max_length:
        raise ValueError(f"input length {length} exceeds the position table ({max_length}); "
                         "truncate the batch to max_length")
    return n, length


class StackedEncoder(nn.Module):
    """M BERT/RoBERTa encoders of one architecture, stacked; see the module docstring.

    ``hidden_dropout`` / ``attention_dropout`` (floats, from the HF config) are the rates every
    member uses; they may be changed between forwards. The pooler is never stored.
    ``fused_attention``: a forward without dropout computes attention as one
    ``scaled_dot_product_attention`` (as Hugging Face's default does) instead of the explicit
    scores and softmax that dropout on the probabilities needs; the same within float rounding, a
    third of the layer's operators fewer. Off by default, so the student's evaluation forward
    stays the one its training forward is; the frozen teachers (``stacked_teachers.py``), which
    never drop out, turn it on.
    """

    def __init__(self, hf_config, state_dicts: Sequence[Mapping[str, torch.Tensor]], *,
                 fused_attention: bool = False):
        super().__init__()
        check_config(hf_config)
        if not state_dicts:
            raise ValueError("StackedEncoder needs at least one member state dict")
        self.hf_config = hf_config
        self._shapes = expected_shapes(hf_config)
        for i, sd in enumerate(state_dicts):
            check_state_dict(sd, self._shapes, f"member {i}")
        for key in self._shapes:
            stacked = torch.stack([sd[key].detach() for sd in state_dicts])  # a copy: no aliasing
            self.register_parameter(_name(key), nn.Parameter(stacked))
        self.hidden_dropout = float(hf_config.hidden_dropout_prob)
        self.attention_dropout = float(hf_config.attention_probs_dropout_prob)
        self._act = ACTIVATIONS[hf_config.hidden_act]
        self._roberta = hf_config.model_type == "roberta"
        self.fused_attention = fused_attention

    @classmethod
    def from_pretrained(cls, source: str | os.PathLike, n_members: int, *,
                        hidden_dropout: float | None = None,
                        attention_dropout: float | None = None) -> StackedEncoder:
        """Load ``source`` once (fp32) and replicate its weights ``n_members`` times: from its
        safetensors files where they hold every tensor (``hf_layout.read_weights``), else through
        ``AutoModel.from_pretrained``."""
        from transformers import AutoConfig

        if n_members < 1:
            raise ValueError(f"n_members={n_members} must be >= 1")
        overrides = {}
        if hidden_dropout is not None:
            overrides["hidden_dropout_prob"] = hidden_dropout
        if attention_dropout is not None:
            overrides["attention_probs_dropout_prob"] = attention_dropout
        cfg = AutoConfig.from_pretrained(source, **overrides)
        check_config(cfg)  # before loading weights
        state = read_weights(source, cfg)
        if state is None:  # a hub name, a .bin file, old key names: transformers knows them all
            from transformers import AutoModel

            state = AutoModel.from_pretrained(source, config=cfg, dtype=torch.float32).state_dict()
        return cls(cfg, [state] * n_members)

    # ----------------------------------------------------------------------------- shapes
    @property
    def n_members(self) -> int:
        return self._p("embeddings.word_embeddings.weight").shape[0]

    @property
    def hidden_size(self) -> int:
        return self.hf_config.hidden_size

    @property
    def num_layers(self) -> int:
        return self.hf_config.num_hidden_layers

    @property
    def num_heads(self) -> int:
        return self.hf_config.num_attention_heads

    @property
    def max_length(self) -> int:
        """Longest input the position table covers (RoBERTa positions start after padding_idx)."""
        n = self.hf_config.max_position_embeddings
        return n - self.hf_config.pad_token_id - 1 if self._roberta else n

    def _p(self, key: str) -> nn.Parameter:
        return self._parameters[_name(key)]

    # ----------------------------------------------------------------------------- members
    note: str | None = None
    """why this array trains slower than a stacked one (None here; see ``looped.py``)"""

    def stacked_parameters(self) -> list[nn.Parameter]:
        """Parameters with a leading member axis: all of them."""
        return list(self.parameters())

    def gathered_parameters(self) -> list[nn.Parameter]:
        """The tables ``_gather`` reads as one (M * V, H) table: they must stay contiguous
        tensors of their own (a strided view would be copied whole at every read)."""
        return [self._p("embeddings.word_embeddings.weight"),
                self._p("embeddings.position_embeddings.weight")]

    def member_parameters(self, i: int) -> list[nn.Parameter]:
        """Parameters that belong to member i alone: none, every parameter is stacked."""
        return []

    def member_state_dict(self, i: int) -> dict[str, torch.Tensor]:
        """Member i as an HF state dict (no pooler): detached clones of shape hf_shape."""
        return {key: self._p(key)[i].detach().clone() for key in self._shapes}

    def member_views(self, i: int) -> dict[str, torch.Tensor]:
        """Member i as an HF state dict of views into the stacked tensors (no copy, no autograd
        history): what lets a Hugging Face model read the stack's weights instead of its own."""
        return {key: self._p(key).data[i] for key in self._shapes}

    def load_member_state_dict(self, i: int, state: Mapping[str, torch.Tensor]) -> None:
        check_state_dict(state, self._shapes, f"load_member_state_dict({i})")
        with torch.no_grad():
            for key in self._shapes:
                self._p(key)[i].copy_(state[key])

    def select(self, indices: Sequence[int]) -> None:
        """Keep only members ``indices``, in that order (the array may shrink or reorder).

        The Parameter objects stay the same (so an optimizer's references stay valid); their
        ``.data`` and ``.grad`` are replaced by the selected rows. An optimiser's per-member
        state is its own to select the same way (``ArrayAdamW.select``); so is a
        ``torch.compile``d step that guards on shapes.
        """
        idx = list(indices)
        m = self.n_members
        if not idx or any(not 0 <= i < m for i in idx):
            raise ValueError(f"select({idx}) needs a non-empty list of member indices in [0, {m})")
        with torch.no_grad():
            for p in self.parameters():
                sel = torch.tensor(idx, device=p.device)
                grad = None if p.grad is None else p.grad.index_select(0, sel)
                p.grad = None
                p.data = p.data.index_select(0, sel)
                p.grad = grad

    # ----------------------------------------------------------------------------- forward
    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        m, length = self.n_members, ids.shape[-1]
        words = _gather(self._p("embeddings.word_embeddings.weight"), ids)
        table = self._p("embeddings.position_embeddings.weight")
        if self._roberta:  # HF create_position_ids_from_input_ids: pad + cumsum of non-pad tokens
            pad = self.hf_config.pad_token_id
            real = ids.ne(pad).int()
            positions = _gather(table, torch.cumsum(real, dim=-1).mul_(real).long() + pad)
        else:
            positions = table[:, :length].unsqueeze(1)
        types = self._p("embeddings.token_type_embeddings.weight")[:, 0].view(m, 1, 1, -1)
        x = words + types + positions  # HF's order: (inputs + token types) + positions
        return _layer_norm(x, self._p("embeddings.LayerNorm.weight"),
                           self._p("embeddings.LayerNorm.bias"), self.hf_config.layer_norm_eps)

    def _layer(self, x: torch.Tensor, add_mask: torch.Tensor, layer: int,
               masks: dropout.DropMasks | None) -> torch.Tensor:
        m, n, length, h = x.shape
        heads, eps = self.num_heads, self.hf_config.layer_norm_eps
        pre = f"encoder.layer.{layer}."
        w = lambda k: self._p(pre + k)  # noqa: E731
        flat = x.view(m, n * length, h)

        def project(name: str) -> torch.Tensor:  # -> (M, N, heads, L, head_dim)
            y = batched_linear(flat, w(f"attention.self.{name}.weight"),
                               w(f"attention.self.{name}.bias"))
            return y.view(m, n, length, heads, h // heads).transpose(2, 3)

        q, k, v = project("query"), project("key"), project("value")
        if masks is None and self.fused_attention:  # 4-D, as the fused kernels want it
            ctx = F.scaled_dot_product_attention(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1),
                                                 attn_mask=add_mask.flatten(0, 1))
            ctx = ctx.view(m, n, heads, length, h // heads)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) * (h // heads) ** -0.5 + add_mask
            probs = F.softmax(scores, dim=-1)
            if masks is not None:
                probs = dropout.apply(probs, masks.attention_probs(layer), masks.attention_scale)
            ctx = torch.matmul(probs, v)
        ctx = ctx.transpose(2, 3).reshape(m, n * length, h)
        a = batched_linear(ctx, w("attention.output.dense.weight"),
                           w("attention.output.dense.bias"))
        a = a.view(m, n, length, h)
        if masks is not None:
            a = dropout.apply(a, masks.attention_output(layer), masks.hidden_scale)
        a = _layer_norm(a + x, w("attention.output.LayerNorm.weight"),
                        w("attention.output.LayerNorm.bias"), eps)
        f = self._act(batched_linear(a.view(m, n * length, h), w("intermediate.dense.weight"),
                                     w("intermediate.dense.bias")))
        f = batched_linear(f, w("output.dense.weight"),
                           w("output.dense.bias")).view(m, n, length, h)
        if masks is not None:
            f = dropout.apply(f, masks.ffn_output(layer), masks.hidden_scale)
        return _layer_norm(f + a, w("output.LayerNorm.weight"), w("output.LayerNorm.bias"), eps)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                generators: Sequence[torch.Generator] | None = None,
                extents: tuple[Sequence[int], Sequence[int]] | None = None) -> torch.Tensor:
        """last_hidden_state (M, N, L, H) of every member.

        ``input_ids``/``attention_mask`` are (M, N, L), member i reading row block i, or (N, L)
        shared by all members. ``generators=None``: no dropout (whatever ``self.training`` is).
        Otherwise one generator per member, on the parameters' device: dropout is on, member i's
        masks drawn from ``generators[i]`` only (stream layout in ``dropout.py``), over its own
        rows and length: ``extents`` (rows, lengths) per member where the caller knows them (the
        trainer does, from the batches' shapes), else read from the mask (one host sync).
        """
        m = self.n_members
        n, length = check_inputs(input_ids, attention_mask, m, self.max_length)
        masks = None
        if generators is not None:  # eager: each member's generator, its own extent
            masks = self._draw(generators, attention_mask, n, length, input_ids.device, extents)
        return self.encode(input_ids, attention_mask, masks)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               masks: dropout.DropMasks | None) -> torch.Tensor:
        """The forward with the dropout masks drawn: pure tensor code, what ``compile``
        (``trainables.arrays.capture``) hands to ``torch.compile``."""
        n, length = attention_mask.shape[-2:]
        x = self._embed(input_ids)
        if masks is not None:
            x = dropout.apply(x, masks.embedding(), masks.hidden_scale)
        # Additive mask as HF's eager path: 0 keep, dtype min on padded keys; (M|1, N, 1, 1, L),
        # (M, N, 1, 1, L) for the fused attention, whose batch axis is members x rows.
        keep = attention_mask.view(-1, n, 1, 1, length).bool()
        fused = masks is None and self.fused_attention
        shape = (self.n_members, *keep.shape[1:]) if fused else keep.shape
        add_mask = torch.zeros(shape, dtype=x.dtype, device=x.device).masked_fill_(
            ~keep, torch.finfo(x.dtype).min)
        for layer in range(self.num_layers):
            x = self._layer(x, add_mask, layer, masks)
        return x

    def _draw(self, generators: Sequence[torch.Generator], attention_mask: torch.Tensor, n: int,
              length: int, device: torch.device,
              extents: tuple[Sequence[int], Sequence[int]] | None = None) -> dropout.DropMasks:
        m = self.n_members
        if len(generators) != m:
            raise ValueError(f"got {len(generators)} generators for {m} members; pass one per member")
        if any(g.device.type != device.type for g in generators):
            raise ValueError(f"generators must live on the model's device ({device}); build them "
                             f"with torch.Generator(device={str(device)!r})")
        if extents is not None:
            rows, lengths = list(extents[0]), list(extents[1])
        elif attention_mask.dim() == 2:
            rows, lengths = (x * m for x in dropout.member_extents(attention_mask[None]))
        else:
            rows, lengths = dropout.member_extents(attention_mask)
        layout = dropout.DropoutLayout(rows=n, hidden=self.hidden_size, heads=self.num_heads,
                                       layers=self.num_layers, hidden_p=self.hidden_dropout,
                                       attention_p=self.attention_dropout)
        return dropout.draw_masks(layout, generators, lengths, length, device, rows=rows)

    def extra_repr(self) -> str:
        return (f"model_type={self.hf_config.model_type}, n_members={self.n_members}, "
                f"layers={self.num_layers}, hidden={self.hidden_size}, heads={self.num_heads}, "
                f"dropout=({self.hidden_dropout}, {self.attention_dropout})")

