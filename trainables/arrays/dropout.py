"""Per-member dropout streams for a trial array: the masks of one training forward.

Member independence needs member i's masks to come from its own generator ``g_i`` and to depend
only on its own batch: N rows and its own length ``L_i`` (1 + the last position where any of its
rows has attention_mask 1), never on the array's padded length L or on the member count M.

Stream layout, one ``uniform_`` call of ``numel(L_i)`` float32 numbers per member per forward,
read in this order (C order inside each block; blocks of a site whose p is 0 are left out):

1. hidden block, ``1 + 2 * layers`` sites of shape (N, L_i, H): the embedding output, then per
   layer the attention output (after its dense) and the FFN output (after its dense);
2. attention block, ``layers`` sites of shape (N, heads, L_i, L_i): the attention probabilities.

A number u drops its element when ``u >= 1 - p``, so an element is kept with probability 1 - p,
and kept elements are scaled by 1 / (1 - p), as ``torch.nn.functional.dropout``. In the array-
shaped masks, positions >= L_i are "keep": padded positions never reach a real token's output
(they are masked keys), so no numbers are spent on them.

Cost per forward: per member one ``uniform_`` into a float32 scratch reused across members and two
compares written straight into its corner of the array's bool masks (3 kernels, no scatter; when
every member has L_i == L the masks are not even zero-filled). The masks, M * numel(L) bools, are
what autograd keeps, as torch's own dropout keeps its bool mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DropoutLayout:
    """Shapes of one forward's dropout sites for one member; see the module docstring."""

    rows: int
    hidden: int
    heads: int
    layers: int
    hidden_p: float
    attention_p: float

    @property
    def hidden_sites(self) -> int:
        return 1 + 2 * self.layers if self.hidden_p > 0 else 0

    @property
    def attention_sites(self) -> int:
        return self.layers if self.attention_p > 0 else 0

    def hidden_numel(self, length: int) -> int:
        return self.hidden_sites * self.rows * length * self.hidden

    def attention_numel(self, length: int) -> int:
        return self.attention_sites * self.rows * self.heads * length * length

    def numel(self, length: int) -> int:
        """Random numbers one member draws for a forward of its own length ``length``."""
        return self.hidden_numel(length) + self.attention_numel(length)


@dataclass
class DropMasks:
    """Array-shaped drop masks (True = drop) and the keep-scales of one forward."""

    hidden: torch.Tensor | None
    """(M, hidden_sites, N, L, H) bool"""
    attention: torch.Tensor | None
    """(M, attention_sites, N, heads, L, L) bool"""
    hidden_scale: float
    attention_scale: float

    def embedding(self) -> torch.Tensor | None:
        return None if self.hidden is None else self.hidden[:, 0]

    def attention_output(self, layer: int) -> torch.Tensor | None:
        return None if self.hidden is None else self.hidden[:, 1 + 2 * layer]

    def ffn_output(self, layer: int) -> torch.Tensor | None:
        return None if self.hidden is None else self.hidden[:, 2 + 2 * layer]

    def attention_probs(self, layer: int) -> torch.Tensor | None:
        return None if self.attention is None else self.attention[:, layer]


def apply(x: torch.Tensor, drop: torch.Tensor | None, scale: float) -> torch.Tensor:
    """Dropout with a given mask; autograd keeps only the bool mask (1 byte per element)."""
    if drop is None:
        return x
    return x.masked_fill(drop, 0.0) * scale


def member_lengths(attention_mask: torch.Tensor) -> list[int]:
    """L_i per member of an (M, N, L) mask: 1 + last position with any 1 (0 if none); one sync."""
    any_row = attention_mask.ne(0).any(dim=1)  # (M, L)
    pos = torch.arange(1, any_row.shape[1] + 1, device=any_row.device)
    return (any_row * pos).amax(dim=1).tolist()


def draw_masks(layout: DropoutLayout, generators: Sequence[torch.Generator], lengths: Sequence[int],
               length: int, device: torch.device) -> DropMasks:
    """Member i's masks from ``generators[i]`` only, for its own ``lengths[i]``, padded to ``length``."""
    m, n, h, heads = len(generators), layout.rows, layout.hidden, layout.heads
    s_h, s_a = layout.hidden_sites, layout.attention_sites
    keep_h, keep_a = 1.0 - layout.hidden_p, 1.0 - layout.attention_p
    # Padded positions must read "keep" (False) unless every member fills the whole length.
    alloc = torch.empty if all(li == length for li in lengths) else torch.zeros
    hid = alloc((m, s_h, n, length, h), dtype=torch.bool, device=device)
    att = alloc((m, s_a, n, heads, length, length), dtype=torch.bool, device=device)
    # One float32 scratch slice per member, always from offset 0: its numbers depend on its size only.
    scratch = torch.empty(max(layout.numel(li) for li in lengths), device=device)
    for i, (g, li) in enumerate(zip(generators, lengths, strict=True)):
        nh, na = layout.hidden_numel(li), layout.attention_numel(li)
        if nh + na == 0:
            continue
        u = scratch[: nh + na].uniform_(0.0, 1.0, generator=g)
        # Compared straight into the member's (possibly strided) corner of the array masks.
        torch.ge(u[:nh].view(s_h, n, li, h), keep_h, out=hid[i, :, :, :li])
        torch.ge(u[nh:].view(s_a, n, heads, li, li), keep_a, out=att[i, :, :, :, :li, :li])
    return DropMasks(
        hidden=hid if layout.hidden_sites else None,
        attention=att if layout.attention_sites else None,
        hidden_scale=1.0 / keep_h,
        attention_scale=1.0 / keep_a,
    )
