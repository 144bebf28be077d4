"""StackedEncoder: HF parity per member, member independence under dropout, member state I/O,
selection (with AdamW state), bf16 autocast and the refused configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModel

from trainables.arrays import StackedEncoder

MODELS = ("tiny_bert", "tiny_roberta", "minilm")
TINY = ("tiny_bert", "tiny_roberta")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One thread (the machine is shared), restored afterwards for the rest of the session."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def hf_model(path: Path, state: dict | None = None):
    model = AutoModel.from_pretrained(path, dtype=torch.float32).eval()
    if state is not None:
        model.load_state_dict(state, strict=False)
    return model


def perturbed(state: dict, seed: int, scale: float = 0.02) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=g) for k, v in state.items()}


def padded_batch(cfg, seed: int, lengths: list[int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random real tokens (never pad or the first 5 ids) left-aligned, pad ids after each length."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, cfg.vocab_size, (len(lengths), length), generator=g)
    mask = (torch.arange(length) < torch.tensor(lengths)[:, None]).long()
    return ids.masked_fill(mask == 0, cfg.pad_token_id), mask


def grads(enc: StackedEncoder, i: int) -> dict[str, torch.Tensor]:
    return {n: p.grad[i] for n, p in enc.named_parameters()}


# ------------------------------------------------------------------------------- HF parity
@pytest.mark.parametrize("model", MODELS)
def test_eval_matches_hf_for_every_member(model, request):
    path = request.getfixturevalue(model)
    ref_model = hf_model(path)
    enc = StackedEncoder.from_pretrained(path, 3)
    assert enc.n_members == 3 and enc.num_layers == ref_model.config.num_hidden_layers
    ids, mask = padded_batch(ref_model.config, 0, [11, 3, 7, 1, 9], 11)
    with torch.no_grad():
        ref = ref_model(input_ids=ids, attention_mask=mask).last_hidden_state
        shared = enc(ids, mask)
        per_member = enc(ids.expand(3, -1, -1), mask.expand(3, -1, -1))
    assert shared.shape == (3, *ids.shape, enc.hidden_size)
    for i in range(3):
        torch.testing.assert_close(shared[i], ref, rtol=0, atol=1e-5)
        torch.testing.assert_close(per_member[i], ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("model", TINY)
def test_members_with_different_weights_match_their_own_hf_model(model, request):
    path = request.getfixturevalue(model)
    base = hf_model(path)
    states = [perturbed(base.state_dict(), s) for s in range(3)]
    enc = StackedEncoder(base.config, states)
    batches = [padded_batch(base.config, 10 + i, [9, 2, 6], 9) for i in range(3)]
    ids, mask = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
    with torch.no_grad():
        out = enc(ids, mask)
        for i, state in enumerate(states):
            ref = hf_model(path, state)(input_ids=ids[i], attention_mask=mask[i]).last_hidden_state
            torch.testing.assert_close(out[i], ref, rtol=0, atol=1e-5)
        assert (out[0] - out[1]).abs().max() > 1e-3  # the members really differ


@pytest.mark.parametrize("model", TINY)
def test_fused_attention_is_the_forward_without_dropout(model, request):
    """``fused_attention`` (the frozen teachers'): the explicit forward's output within rounding,
    shared and per-member ids, also under bf16 autocast; with dropout it is not used at all."""
    base = hf_model(request.getfixturevalue(model))
    states = [perturbed(base.state_dict(), s) for s in range(3)]
    explicit = StackedEncoder(base.config, states)
    fused = StackedEncoder(base.config, states, fused_attention=True)
    ids, mask = padded_batch(base.config, 3, [9, 2, 6], 9)
    batches = [padded_batch(base.config, 20 + i, [9, 4, 1], 9) for i in range(3)]
    per = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
    with torch.no_grad():
        for x, m in ((ids, mask), per):
            torch.testing.assert_close(fused(x, m), explicit(x, m), rtol=0, atol=1e-5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = fused(ids, mask)
        torch.testing.assert_close(low.float(), explicit(ids, mask), rtol=0, atol=0.1)
        gens = lambda: [torch.Generator().manual_seed(s) for s in range(3)]  # noqa: E731
        assert torch.equal(fused(ids, mask, gens()), explicit(ids, mask, gens()))


# ------------------------------------------------------------------------------- independence
def _alone_and_in_array(path: Path, pad_alone_to_array: bool):
    """Member (weights s2, seed 123, its own batch of length 9) alone, and at index 2 of an
    array of 5 whose other members have other weights, other seeds and batches of length 14."""
    base = hf_model(path)
    cfg = base.config
    states = [perturbed(base.state_dict(), s) for s in range(5)]
    own_ids, own_mask = padded_batch(cfg, 7, [9, 4, 6, 2], 9)  # L_i = 9
    batches = [padded_batch(cfg, 20 + j, [14, 3, 11, 5], 14) for j in range(5)]
    big_ids = torch.full((4, 14), cfg.pad_token_id)
    big_mask = torch.zeros(4, 14, dtype=torch.long)
    big_ids[:, :9], big_mask[:, :9] = own_ids, own_mask
    batches[2] = (big_ids, big_mask)

    alone = StackedEncoder(cfg, [states[2]])
    g_alone = torch.Generator().manual_seed(123)
    ids1, mask1 = (big_ids, big_mask) if pad_alone_to_array else (own_ids, own_mask)
    out1 = alone(ids1[None], mask1[None], [g_alone])

    array = StackedEncoder(cfg, states)
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 123, 4, 5)]
    out5 = array(torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches]), gens)

    real = own_mask.bool()
    y1, y5 = out1[0, :, :9][real], out5[2, :, :9][real]
    (y1.square().sum() + y1[:, 0].sum()).backward()
    (y5.square().sum() + y5[:, 0].sum()).backward()
    return alone, array, g_alone, gens[2], y1, y5, out1, out5, (own_ids, own_mask)


@pytest.mark.parametrize("model", TINY)
def test_member_independence_is_bit_exact_at_equal_shapes(model, request):
    """Alone (its batch padded to the array's 14) vs in the array: member 2 sees the same shapes,
    so every op is the same computation; only M, its index and its neighbours change."""
    alone, array, g1, g5, _, _, out1, out5, _ = _alone_and_in_array(request.getfixturevalue(model), True)
    assert torch.equal(g1.get_state(), g5.get_state())
    assert torch.equal(out1[0], out5[2])  # padded positions included
    g_alone, g_array = grads(alone, 0), grads(array, 2)
    for name, g in g_alone.items():
        assert torch.equal(g, g_array[name]), name


@pytest.mark.parametrize("model", TINY)
def test_member_independence_with_longer_neighbours(model, request):
    """Alone at its own length 9 vs in an array padded to 14.

    The dropout masks are the same bits (test_dropout checks the masks themselves, and the
    generators end in the same state), but the arithmetic is not the same sequence of fp32
    operations: the CPU BLAS takes another kernel for a (9, 9) than for a (14, 14) score matrix
    (below 12 rows here), and a
    parameter's gradient sums N*9 vs N*14 token slots (the extra slots add exact zeros) in a
    different vectorised order. So outputs and gradients agree to fp32 rounding (observed <= 2e-7
    of each tensor's scale), checked at 1e-5 of it; a different dropout mask moves them far more
    (another seed moves the outputs by more than 1e-2 of their scale, asserted below).
    """
    alone, array, g1, g5, y1, y5, _, _, (ids, mask) = _alone_and_in_array(
        request.getfixturevalue(model), False)
    assert torch.equal(g1.get_state(), g5.get_state())
    torch.testing.assert_close(y1, y5, rtol=0, atol=1e-5 * y1.abs().max().item())
    with torch.no_grad():  # the same member with another seed: what a mask change looks like
        other = alone(ids[None], mask[None], [torch.Generator().manual_seed(124)])[0, :, :9]
    assert (other[mask.bool()] - y1).abs().max() > 1e-2 * y1.abs().max()
    g_alone, g_array = grads(alone, 0), grads(array, 2)
    for name, g in g_alone.items():
        # A key bias's gradient is zero up to rounding (softmax is shift invariant): its rounding
        # noise scales with the query bias's gradient, so that is its scale.
        scale = g_alone[name.replace("key__bias", "query__bias")].abs().max().item()
        atol = 1e-5 * scale
        torch.testing.assert_close(g, g_array[name], rtol=0, atol=atol, msg=name)
    assert all(p.grad[[0, 1, 3, 4]].abs().sum() == 0 for p in array.parameters())  # no leak


def test_member_with_empty_padding_rows_draws_as_its_short_batch(tiny_bert):
    """A short last batch (2 rows) padded with empty rows to the array's 4: the member's
    generator advances as for its 2 x 6 batch alone, and its real rows match (fp32 rounding,
    as in test_member_independence_with_longer_neighbours)."""
    base = hf_model(tiny_bert)
    cfg, state = base.config, base.state_dict()
    ids, mask = padded_batch(cfg, 3, [6, 4], 6)
    alone_gen = torch.Generator().manual_seed(5)
    alone = StackedEncoder(cfg, [state])(ids[None], mask[None], [alone_gen])[0]
    other_ids, other_mask = padded_batch(cfg, 4, [6, 6, 5, 3], 6)
    pad_ids = torch.cat([ids, torch.full((2, 6), cfg.pad_token_id)])
    pad_mask = torch.cat([mask, torch.zeros(2, 6, dtype=torch.long)])
    gens = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(5)]
    out = StackedEncoder(cfg, [perturbed(state, 1), state])(
        torch.stack([other_ids, pad_ids]), torch.stack([other_mask, pad_mask]), gens)
    assert torch.equal(alone_gen.get_state(), gens[1].get_state())
    real = mask.bool()
    torch.testing.assert_close(out[1, :2][real], alone[real], rtol=0,
                               atol=1e-5 * alone.abs().max().item())


@pytest.mark.parametrize("model", TINY)
def test_dropout_is_real_and_seeded(model, request):
    path = request.getfixturevalue(model)
    enc = StackedEncoder.from_pretrained(path, 2)
    ids, mask = padded_batch(enc.hf_config, 3, [8, 5, 8], 8)
    ids, mask = ids.expand(2, -1, -1), mask.expand(2, -1, -1)
    with torch.no_grad():
        eval_out = enc(ids, mask)
        a = enc(ids, mask, [torch.Generator().manual_seed(s) for s in (0, 1)])
        b = enc(ids, mask, [torch.Generator().manual_seed(s) for s in (0, 2)])
    real = mask[0].bool()
    assert torch.equal(a[0], b[0])  # same seed, same member 0, whatever member 1's seed
    assert not torch.allclose(a[1][real], b[1][real], atol=1e-3)  # other seed, other masks
    assert not torch.allclose(a[0][real], a[1][real], atol=1e-3)  # same weights, own streams
    assert (a[0][real] - eval_out[0][real]).abs().max() > 1e-2

    # p = 0 everywhere: no numbers drawn, output equals the eval output
    enc.hidden_dropout = enc.attention_dropout = 0.0
    g = torch.Generator().manual_seed(0)
    before = g.get_state()
    with torch.no_grad():
        out = enc(ids, mask, [g, torch.Generator()])
    assert torch.equal(g.get_state(), before)
    torch.testing.assert_close(out, eval_out, rtol=0, atol=0)


# ------------------------------------------------------------------------------- member state
@pytest.mark.parametrize("model", TINY)
def test_member_state_dict_round_trips_into_hf(model, request):
    path = request.getfixturevalue(model)
    base = hf_model(path)
    states = [perturbed(base.state_dict(), s) for s in range(3)]
    enc = StackedEncoder(base.config, states)
    ids, mask = padded_batch(base.config, 5, [10, 4, 7], 10)
    with torch.no_grad():
        out = enc(ids, mask)
    sd = enc.member_state_dict(1)
    assert all(t.shape == states[1][k].shape and torch.equal(t, states[1][k]) for k, t in sd.items())
    fresh = AutoModel.from_config(base.config).eval()
    missing, unexpected = fresh.load_state_dict(sd, strict=False)
    assert unexpected == [] and missing and all(k.startswith("pooler.") for k in missing)
    with torch.no_grad():
        torch.testing.assert_close(fresh(input_ids=ids, attention_mask=mask).last_hidden_state,
                                   out[1], rtol=0, atol=1e-5)
        sd["embeddings.LayerNorm.bias"] += 1.0  # a detached clone: the array is unchanged
        assert torch.equal(enc(ids, mask), out)

        enc.load_member_state_dict(0, enc.member_state_dict(2))
        assert torch.equal(enc(ids, mask)[0], out[2])


def test_select_keeps_members_in_order_with_their_adamw_state(tiny_bert):
    """Two copies take one step of the array's AdamW; one then keeps members [2, 0] (the
    encoder's select, then the optimiser's, as the trainer does) and both take a second step:
    the kept members end exactly where the full array's members 2 and 0 do."""
    from trainables.arrays.optim import ArrayAdamW, MemberHyper

    base = hf_model(tiny_bert)
    states = [perturbed(base.state_dict(), s) for s in range(3)]
    ids, mask = padded_batch(base.config, 5, [10, 4, 7], 10)

    def step(enc, opt, members):
        opt.zero_grad()
        enc(ids, mask, [torch.Generator().manual_seed(s) for s in members])[:, :, 0].square().sum().backward()
        opt.step()

    def adamw(enc):
        hyper = [MemberHyper(1e-2, 0.01, 1e-8, 1e9, "torch")] * 3
        return ArrayAdamW(list(enc.parameters()), [[] for _ in hyper], hyper, total_steps=100)

    full, part = StackedEncoder(base.config, states), StackedEncoder(base.config, states)
    opts = [adamw(e) for e in (full, part)]
    for e, o in zip((full, part), opts, strict=True):
        step(e, o, [0, 1, 2])
    params_before = {id(p) for p in part.parameters()}
    part.select([2, 0])
    opts[1].select([2, 0], list(part.parameters()))
    assert part.n_members == 2 and {id(p) for p in part.parameters()} == params_before
    assert opts[1].n_members == 2
    assert all(m.shape == p.shape for m, p in zip(opts[1].m_st, part.parameters(), strict=True))
    step(full, opts[0], [0, 1, 2])
    step(part, opts[1], [2, 0])  # each member keeps its own seed at its new index
    for j, i in enumerate([2, 0]):
        ref = full.member_state_dict(i)
        for k, t in part.member_state_dict(j).items():
            assert torch.equal(t, ref[k]), (j, k)
    with pytest.raises(ValueError, match="member indices"):
        part.select([2])


def test_shared_and_per_member_inputs_agree_under_bf16_autocast(tiny_bert):
    """Autocast: batched matmuls in bf16, LayerNorm/softmax in fp32 (CPU here; CUDA in test_gpu)."""
    enc = StackedEncoder.from_pretrained(tiny_bert, 2)
    ids, mask = padded_batch(enc.hf_config, 1, [9, 3], 9)
    with torch.no_grad():
        ref = enc(ids, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = enc(ids, mask, [torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)])
        eval_out = enc(ids, mask)
    out[:, :, 0].float().square().sum().backward()
    assert torch.isfinite(out).all() and all(torch.isfinite(p.grad).all() for p in enc.parameters())
    torch.testing.assert_close(eval_out.float(), ref, rtol=0, atol=0.1)


# ------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("setting, match", [
    ({"position_embedding_type": "relative_key"}, "position_embedding_type='relative_key'"),
    ({"is_decoder": True}, "is_decoder"),
    ({"hidden_act": "swish"}, "hidden_act='swish'"),
    ({"hidden_dropout_prob": 1.0}, "hidden_dropout_prob=1.0"),
])
def test_bad_configs_raise_one_line(tiny_bert, setting, match):
    cfg = AutoConfig.from_pretrained(tiny_bert)
    state = hf_model(tiny_bert).state_dict()
    for k, v in setting.items():
        setattr(cfg, k, v)
    with pytest.raises(ValueError, match=match) as err:
        StackedEncoder(cfg, [state])
    assert "\n" not in str(err.value)


def test_bad_model_type_state_and_inputs_raise(tiny_bert, tmp_path):
    from transformers import DistilBertConfig, DistilBertModel

    DistilBertModel(DistilBertConfig(dim=16, n_layers=1, n_heads=2, hidden_dim=32)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="model_type='distilbert'"):
        StackedEncoder.from_pretrained(tmp_path, 2)
    base = hf_model(tiny_bert)
    state = base.state_dict()
    with pytest.raises(ValueError, match="missing keys"):
        StackedEncoder(base.config, [{k: v for k, v in state.items() if "layer.1." not in k}])
    enc = StackedEncoder(base.config, [state, state])
    ids, mask = padded_batch(base.config, 0, [4, 2], 4)
    with pytest.raises(ValueError, match="2 members"):
        enc(ids, mask, [torch.Generator()])
    with pytest.raises(ValueError, match="member blocks"):
        enc(ids[None], mask[None])
    long = base.config.max_position_embeddings + 1
    with pytest.raises(ValueError, match="position table"):
        enc(torch.ones(1, long, dtype=torch.long), torch.ones(1, long, dtype=torch.long))


@pytest.mark.parametrize("autocast", [False, True])
def test_batched_linear_is_baddbmm_with_the_weight_gradient_in_its_layout(autocast):
    """The weight gradient of ``batched_linear`` is laid out as the weight (autograd's baddbmm
    hands it over transposed, which costs a copy a weight a step); values and every gradient
    are baddbmm's, in fp64 to rounding and under bf16 autocast to bf16's."""
    from trainables.arrays.encoder import batched_linear

    dtype = torch.float32 if autocast else torch.float64
    gen = torch.Generator().manual_seed(0)
    x0, w0, b0 = (torch.randn(*s, generator=gen, dtype=dtype) for s in ((3, 10, 6), (3, 4, 6), (3, 4)))
    g = torch.randn(3, 10, 4, generator=gen, dtype=dtype)
    outs, grads = [], []
    for fn in (batched_linear, lambda x, w, b: torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))):
        x, w, b = (t.clone().requires_grad_() for t in (x0, w0, b0))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y = fn(x, w, b)
        outs.append(y.detach())
        # as computed, before autograd copies a gradient into its leaf's layout
        grads.append(torch.autograd.grad(y, (x, w, b), g.to(y.dtype)))
    assert outs[0].dtype == outs[1].dtype == (torch.bfloat16 if autocast else torch.float64)
    tol = {"rtol": 2e-2, "atol": 2e-2} if autocast else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(outs[0], outs[1], **tol)
    for mine, theirs in zip(grads[0], grads[1], strict=True):
        assert mine.dtype == theirs.dtype == dtype  # cast back to the parameter's dtype
        torch.testing.assert_close(mine, theirs, **tol)
    assert grads[0][1].is_contiguous() and not grads[1][1].is_contiguous()
