"""The fallback for encoders the stacked encoder cannot express: the Hugging Face models themselves,
one per member, run one after another.

``StackedEncoder`` reproduces BERT and RoBERTa with batched matmuls over the member axis. Any
other bidirectional encoder (DistilBERT, MPNet, ELECTRA, DeBERTa, ...; or a BERT with relative
positions) trains through :class:`LoopedEncoder` instead: the same interface (``forward`` to
(M, N, L, H), per-member state dicts, ``select``), so ``ArrayModel``, ``ArrayAdamW`` and
``ArrayTrainer`` treat both alike. Each member is its own ``AutoModel``; its parameters are the
member's own (``member_parameters``), so AdamW moments, clipping and the LR schedule stay per
member exactly as for stacked members.

Member independence holds as for stacked members: member i's forward reads only its own rows,
cut to its own extent (``N_i`` rows, ``L_i`` positions, as ``dropout.py`` defines them), so no
shape of the array reaches it, and its dropout comes from its own generator. Hugging Face dropout
draws from torch's global RNG, so the global state is set from member i's generator for its
forward and written back after it (:func:`member_rng`); the global RNG itself is left as it was.

It is slower than a stacked array of the same size: M forwards and backwards of one member's
batch instead of one batched pass (``bench/README.md``, "table_timing.py"), which is what the
note (:func:`fallback_note`) says once per array. The embedding is the first token's last hidden
state, as for stacked members (docs/encoders.md says why, per architecture).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
from collections.abc import Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from trainables.arrays import dropout
from trainables.arrays.encoder import StackedEncoder, check_inputs
from trainables.arrays.hf_layout import stacked_unsupported
from trainables.models.student import check_encoder_only, max_positions


def fallback_note(hf_config) -> str | None:
    """The one line an array of this encoder prints, or None when it stacks."""
    why = stacked_unsupported(hf_config)
    if why is None:
        return None
    return (f"{hf_config.model_type}: not expressible as a stacked array ({why}); members train "
            "one by one (slower: no shared batched forward)")


@functools.cache
def backend_note(encoder: str, cache_dir: str | None = None) -> str | None:
    """:func:`fallback_note` of a run's ``encoder`` setting (the driver's view, read once)."""
    from transformers import AutoConfig

    from trainables.models.pretrained import resolve_encoder

    return fallback_note(AutoConfig.from_pretrained(resolve_encoder(encoder, cache_dir)))


def build_encoder(source: str | os.PathLike, n_members: int) -> StackedEncoder | LoopedEncoder:
    """The stacked encoder where it can express ``source``, else the looped fallback."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(source)
    if stacked_unsupported(cfg) is None:
        return StackedEncoder.from_pretrained(source, n_members)
    return LoopedEncoder.from_pretrained(source, n_members)


@contextlib.contextmanager
def member_rng(g: torch.Generator) -> Iterator[None]:
    """Within the block, torch's global RNG of ``g``'s device continues ``g``'s stream; after it,
    ``g`` has advanced by what the block drew and the global RNG is as it was before."""
    dev = g.device
    if dev.type == "cpu":
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(g.get_state())
            yield
            g.set_state(torch.get_rng_state())
        return
    backend = getattr(torch, dev.type)
    with torch.random.fork_rng(devices=[dev], device_type=dev.type):
        backend.set_rng_state(g.get_state(), dev)
        yield
        g.set_state(backend.get_rng_state(dev))


class LoopedEncoder(nn.Module):
    """M Hugging Face encoders of one architecture, run one by one; see the module docstring."""

    def __init__(self, hf_config, models: Sequence[nn.Module]):
        super().__init__()
        check_encoder_only(hf_config, getattr(hf_config, "_name_or_path", "") or hf_config.model_type)
        if not models:
            raise ValueError("LoopedEncoder needs at least one member model")
        self.hf_config = hf_config
        self.members = nn.ModuleList(models)
        for m in self.members:
            if getattr(m, "pooler", None) is not None:  # never used: frozen, as in Student
                m.pooler.requires_grad_(False)
        self.note = fallback_note(hf_config) or (
            f"{hf_config.model_type}: members train one by one (slower: no shared batched forward)")

    @classmethod
    def from_pretrained(cls, source: str | os.PathLike, n_members: int) -> LoopedEncoder:
        """Load ``source`` once (fp32) and copy it ``n_members`` times."""
        from transformers import AutoConfig, AutoModel

        if n_members < 1:
            raise ValueError(f"n_members={n_members} must be >= 1")
        cfg = AutoConfig.from_pretrained(source)
        check_encoder_only(cfg, str(source))  # before loading weights
        base = AutoModel.from_pretrained(source, config=cfg, dtype=torch.float32)
        return cls(cfg, [base] + [copy.deepcopy(base) for _ in range(n_members - 1)])

    # ----------------------------------------------------------------------------- shapes
    @property
    def n_members(self) -> int:
        return len(self.members)

    @property
    def hidden_size(self) -> int:
        return self.hf_config.hidden_size

    @property
    def max_length(self) -> int:
        return max_positions(self.hf_config)

    # ----------------------------------------------------------------------------- members
    def stacked_parameters(self) -> list[nn.Parameter]:
        """Parameters with a leading member axis: none, each member holds its own."""
        return []

    def gathered_parameters(self) -> list[nn.Parameter]:
        """Stacked tables read across members: none."""
        return []

    def member_parameters(self, i: int) -> list[nn.Parameter]:
        """Member i's trainable parameters (its frozen pooler left out)."""
        return [p for p in self.members[i].parameters() if p.requires_grad]

    def member_state_dict(self, i: int) -> dict[str, torch.Tensor]:
        """Member i's Hugging Face state dict: detached clones."""
        return {k: v.detach().clone() for k, v in self.members[i].state_dict().items()}

    def load_member_state_dict(self, i: int, state: Mapping[str, torch.Tensor]) -> None:
        try:
            self.members[i].load_state_dict(state)
        except RuntimeError as e:
            first = str(e).strip().splitlines()[0]
            raise ValueError(f"load_member_state_dict({i}): {first}; pass a state dict of this "
                             f"{self.hf_config.model_type} architecture") from None

    def select(self, indices: Sequence[int]) -> None:
        """Keep only members ``indices``, in that order. The modules (and so their Parameter
        objects, which an optimiser holds per member) are kept as they are; nothing is stacked,
        so there is no optimiser state to select here."""
        idx = list(indices)
        m = self.n_members
        if not idx or any(not 0 <= i < m for i in idx) or len(set(idx)) != len(idx):
            raise ValueError(f"select({idx}) needs a non-empty list of distinct member indices in [0, {m})")
        self.members = nn.ModuleList([self.members[i] for i in idx])

    # ----------------------------------------------------------------------------- forward
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                generators: Sequence[torch.Generator] | None = None,
                extents: tuple[Sequence[int], Sequence[int]] | None = None) -> torch.Tensor:
        """last_hidden_state (M, N, L, H) of every member, as ``StackedEncoder.forward``.

        ``generators=None``: no dropout (each model in eval mode). Otherwise dropout is on and
        member i's draws come from ``generators[i]`` only; its output rows and positions beyond
        its own extent are 0 (never read: they are padding).
        """
        m = self.n_members
        n, length = check_inputs(input_ids, attention_mask, m, self.max_length)
        train = generators is not None
        if train:
            if len(generators) != m:
                raise ValueError(f"got {len(generators)} generators for {m} members; pass one per member")
            if any(g.device.type != input_ids.device.type for g in generators):
                raise ValueError(f"generators must live on the model's device ({input_ids.device})")
        shared = input_ids.dim() == 2
        if shared:  # the same rows for all (evaluation): nothing to cut
            rows, lengths = [n] * m, [length] * m
        elif extents is not None:  # each member's own extent, known to the caller: no sync
            rows, lengths = list(extents[0]), list(extents[1])
        else:  # each member's own extent, so no array shape reaches its forward (one sync)
            rows, lengths = dropout.member_extents(attention_mask)
        outs: list[torch.Tensor | None] = []
        for i, model in enumerate(self.members):
            model.train(train)
            ni, li = rows[i], lengths[i]
            if ni == 0 or li == 0:  # a member without a real token this step: all padding
                outs.append(None)
                continue
            ids = input_ids if shared else input_ids[i]
            mask = attention_mask if shared else attention_mask[i]
            with member_rng(generators[i]) if train else contextlib.nullcontext():
                h = model(input_ids=ids[:ni, :li], attention_mask=mask[:ni, :li]).last_hidden_state
            outs.append(F.pad(h, (0, 0, 0, length - li, 0, n - ni)))
        like = next((o for o in outs if o is not None), None)
        zeros = (like.new_zeros(like.shape) if like is not None else
                 torch.zeros(n, length, self.hidden_size, device=input_ids.device))
        return torch.stack([zeros if o is None else o for o in outs])

    def extra_repr(self) -> str:
        return f"model_type={self.hf_config.model_type}, n_members={self.n_members} (looped)"
