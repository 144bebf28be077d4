"""Per-member dropout streams for a trial array: the masks of one training forward.

Member independence needs member i's masks to come from its own generator ``g_i`` and to depend
only on its own batch: its own rows ``N_i`` (1 + the last row with any attention_mask 1; a
member's short last batch of a pass is padded with empty rows in the array) and its own length
``L_i`` (1 + the last position where any of its rows has attention_mask 1), never on the array's
padded sizes N and L or on the member count M.

Stream layout, one ``uniform_`` call of ``numel(L_i, N_i)`` float32 numbers per member per
forward, read in this order (C order inside each block; blocks of a site whose p is 0 are left
out):

1. hidden block, ``1 + 2 * layers`` sites of shape (N_i, L_i, H): the embedding output, then per
   layer the attention output (after its dense) and the FFN output (after its dense);
2. attention block, ``layers`` sites of shape (N_i, heads, L_i, L_i): the attention probabilities.

A number u drops its element when ``u >= 1 - p``, so an element is kept with probability 1 - p,
and kept elements are scaled by 1 / (1 - p), as ``torch.nn.functional.dropout``. In the array-
shaped masks, positions >= L_i and rows >= N_i are "keep": padded positions never reach a real
token's output (they are masked keys) and padded rows are never read, so no numbers are spent
on them.

Cost per forward: per member one ``uniform_`` into a float32 scratch reused across members and
two compares written straight into its corner of the array's bool masks (3 kernels, no scatter;
when every member has N_i == N and L_i == L the masks are not even zero-filled). The masks,
M * numel(L, N) bools, are what autograd keeps, as torch's own dropout keeps its bool mask.
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

    def hidden_numel(self, length: int, rows: int | None = None) -> int:
        return self.hidden_sites * (self.rows if rows is None else rows) * length * self.hidden

    def attention_numel(self, length: int, rows: int | None = None) -> int:
        r = self.rows if rows is None else rows
        return self.attention_sites * r * self.heads * length * length

    def numel(self, length: int, rows: int | None = None) -> int:
        """Random numbers one member draws for a forward of its own ``rows`` x ``length``."""
        return self.hidden_numel(length, rows) + self.attention_numel(length, rows)


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
    return member_extents(attention_mask)[1]


def member_extents(attention_mask: torch.Tensor) -> tuple[list[int], list[int]]:
    """(N_i, L_i) per member of an (M, N, L) mask: 1 + the last row / position with any 1."""
    real = attention_mask.ne(0)
    any_pos, any_row = real.any(dim=1), real.any(dim=2)  # (M, L), (M, N)
    pos = torch.arange(1, any_pos.shape[1] + 1, device=real.device)
    row = torch.arange(1, any_row.shape[1] + 1, device=real.device)
    both = torch.stack([(any_row * row).amax(dim=1), (any_pos * pos).amax(dim=1)])
    rows, lengths = both.tolist()  # one sync for both
    return rows, lengths


def draw_masks(layout: DropoutLayout, generators: Sequence[torch.Generator], lengths: Sequence[int],
               length: int, device: torch.device, rows: Sequence[int] | None = None) -> DropMasks:
    """Member i's masks from ``generators[i]`` only, for its own ``rows[i]`` x ``lengths[i]``
    (rows default: all ``layout.rows``), padded to ``layout.rows`` x ``length``."""
    m, n, h, heads = len(generators), layout.rows, layout.hidden, layout.heads
    rows = [n] * m if rows is None else list(rows)
    s_h, s_a = layout.hidden_sites, layout.attention_sites
    keep_h, keep_a = 1.0 - layout.hidden_p, 1.0 - layout.attention_p
    # Padded rows/positions must read "keep" (False) unless every member fills the whole array.
    full = all(li == length for li in lengths) and all(ni == n for ni in rows)
    alloc = torch.empty if full else torch.zeros
    hid = alloc((m, s_h, n, length, h), dtype=torch.bool, device=device)
    att = alloc((m, s_a, n, heads, length, length), dtype=torch.bool, device=device)
    # One float32 scratch slice per member, always from offset 0: its numbers depend on its size only.
    scratch = torch.empty(max(layout.numel(li, ni) for li, ni in zip(lengths, rows, strict=True)),
                          device=device)
    for i, (g, li, ni) in enumerate(zip(generators, lengths, rows, strict=True)):
        nh, na = layout.hidden_numel(li, ni), layout.attention_numel(li, ni)
        if nh + na == 0:
            continue
        u = scratch[: nh + na].uniform_(0.0, 1.0, generator=g)
        # Compared straight into the member's (possibly strided) corner of the array masks.
        torch.ge(u[:nh].view(s_h, ni, li, h), keep_h, out=hid[i, :, :ni, :li])
        torch.ge(u[nh:].view(s_a, ni, heads, li, li), keep_a, out=att[i, :, :ni, :, :li, :li])
    return DropMasks(
        hidden=hid if layout.hidden_sites else None,
        attention=att if layout.attention_sites else None,
        hidden_scale=1.0 / keep_h,
        attention_scale=1.0 / keep_a,
    )
