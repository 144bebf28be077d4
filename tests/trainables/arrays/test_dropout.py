"""Per-member dropout streams: a member's masks are the same bits alone or in any array, padded
positions are kept, drop rates and scales are torch's, and the stream layout is the documented one."""

from __future__ import annotations

import torch

from trainables.arrays.dropout import (
    DropoutLayout,
    apply,
    draw_masks,
    member_extents,
    member_lengths,
)

LAYOUT = DropoutLayout(rows=3, hidden=8, heads=2, layers=2, hidden_p=0.1, attention_p=0.3)


def _gens(*seeds: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(s) for s in seeds]


def test_member_masks_do_not_depend_on_array_length_index_or_neighbours():
    alone_gen = _gens(9)
    alone = draw_masks(LAYOUT, alone_gen, [5], 5, torch.device("cpu"))  # fast path
    gens = _gens(1, 2, 9, 4)
    array = draw_masks(LAYOUT, gens, [7, 3, 5, 7], 7, torch.device("cpu"))  # scatter path
    assert torch.equal(alone_gen[0].get_state(), gens[2].get_state())
    assert torch.equal(array.hidden[2, :, :, :5], alone.hidden[0])
    assert torch.equal(array.attention[2, :, :, :, :5, :5], alone.attention[0])
    assert not array.hidden[2, :, :, 5:].any() and not array.attention[2, ..., 5:, :].any()
    assert not array.attention[2, ..., 5:].any()  # padded queries and keys are "keep"
    # a neighbour with the full length takes the fast-path layout within the scatter path
    full = draw_masks(LAYOUT, _gens(4), [7], 7, torch.device("cpu"))
    assert torch.equal(array.hidden[3], full.hidden[0])
    assert torch.equal(array.attention[3], full.attention[0])


def test_member_with_fewer_rows_draws_for_its_own_rows_only():
    """A member whose short last batch is padded with empty rows: its stream is that of its
    N_i x L_i batch alone; the padded rows are "keep"."""
    alone_gen = _gens(9)
    alone = draw_masks(DropoutLayout(**{**vars(LAYOUT), "rows": 2}), alone_gen, [5], 5,
                       torch.device("cpu"))
    gens = _gens(1, 9)
    array = draw_masks(LAYOUT, gens, [7, 5], 7, torch.device("cpu"), rows=[3, 2])
    assert torch.equal(alone_gen[0].get_state(), gens[1].get_state())
    assert torch.equal(array.hidden[1, :, :2, :5], alone.hidden[0])
    assert torch.equal(array.attention[1, :, :2, :, :5, :5], alone.attention[0])
    assert not array.hidden[1, :, 2:].any() and not array.attention[1, :, 2:].any()


def test_stream_layout_is_one_uniform_draw_hidden_block_then_attention_block():
    n, length = LAYOUT.rows, 4
    u = torch.rand(LAYOUT.numel(length), generator=torch.Generator().manual_seed(3))
    masks = draw_masks(LAYOUT, _gens(3), [length], length, torch.device("cpu"))
    nh = LAYOUT.hidden_numel(length)
    assert nh == 5 * n * length * 8 and LAYOUT.attention_numel(length) == 2 * n * 2 * length**2
    assert torch.equal(masks.hidden[0].flatten(), u[:nh] >= 0.9)
    assert torch.equal(masks.attention[0].flatten(), u[nh:] >= 0.7)
    # embedding, then per layer attention output and FFN output
    site, a_site = n * length * 8, n * 2 * length**2
    assert torch.equal(masks.ffn_output(1)[0].flatten(), u[4 * site: 5 * site] >= 0.9)
    assert torch.equal(masks.attention_probs(1)[0].flatten(), u[nh + a_site:] >= 0.7)


def test_drop_rates_and_scale_match_torch_dropout():
    layout = DropoutLayout(rows=16, hidden=64, heads=4, layers=2, hidden_p=0.1, attention_p=0.25)
    masks = draw_masks(layout, _gens(0, 1), [32, 32], 32, torch.device("cpu"))
    # ~330k / 260k Bernoulli draws per member: the rate's standard error is below 1e-3
    for i in range(2):
        assert abs(masks.hidden[i].float().mean().item() - 0.1) < 5e-3
        assert abs(masks.attention[i].float().mean().item() - 0.25) < 5e-3
    assert not torch.equal(masks.hidden[0], masks.hidden[1])
    x = torch.ones(2, 16, 32, 64)
    y = apply(x, masks.embedding(), masks.hidden_scale)
    assert y.unique().tolist() == torch.tensor([0.0, 1.0 / 0.9]).tolist()
    assert abs(y.mean().item() - 1.0) < 0.02


def test_zero_rate_sites_draw_nothing():
    layout = DropoutLayout(rows=2, hidden=4, heads=2, layers=3, hidden_p=0.1, attention_p=0.0)
    assert layout.numel(5) == 7 * 2 * 5 * 4
    g = _gens(0)
    masks = draw_masks(layout, g, [5], 5, torch.device("cpu"))
    assert masks.attention is None and masks.attention_probs(0) is None
    assert torch.equal(g[0].get_state(), _advanced(layout.numel(5)))


def _advanced(numel: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    torch.rand(numel, generator=g)
    return g.get_state()


def test_member_extents_are_last_real_row_and_position_plus_one():
    mask = torch.zeros(3, 2, 6, dtype=torch.long)
    mask[0, 0, :4] = 1
    mask[1, 1, :6] = 1
    assert member_lengths(mask) == [4, 6, 0]
    assert member_extents(mask) == ([1, 2, 0], [4, 6, 0])
