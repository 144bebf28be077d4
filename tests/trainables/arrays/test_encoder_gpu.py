"""StackedEncoder on CUDA: bf16 autocast against HF under the same autocast, and per-member
dropout streams from CUDA generators. Run with `python -m pytest -m gpu tests/trainables/arrays`."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel

from tests.trainables.arrays.test_encoder import padded_batch
from trainables.arrays import StackedEncoder
from trainables.arrays.dropout import DropoutLayout, draw_masks

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda")


def _gens(*seeds: int) -> list[torch.Generator]:
    return [torch.Generator(device=CUDA).manual_seed(s) for s in seeds]


def test_bf16_autocast_matches_hf_and_trains(tiny_bert):
    hf = AutoModel.from_pretrained(tiny_bert, dtype=torch.float32).to(CUDA).eval()
    enc = StackedEncoder.from_pretrained(tiny_bert, 3).to(CUDA)
    ids, mask = (t.to(CUDA) for t in padded_batch(hf.config, 0, [11, 3, 7], 11))
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        ref = hf(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        out = enc(ids, mask).float()
    for i in range(3):  # bf16 matmuls on both sides, in different orders: bf16-level agreement
        torch.testing.assert_close(out[i], ref, rtol=0, atol=0.1)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = enc(ids, mask, _gens(0, 1, 2))
    y[:, :, 0].float().square().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in enc.parameters())


def test_cuda_member_masks_do_not_depend_on_the_array():
    layout = DropoutLayout(rows=4, hidden=32, heads=4, layers=2, hidden_p=0.1, attention_p=0.1)
    alone = draw_masks(layout, _gens(9), [5], 5, CUDA)
    array = draw_masks(layout, _gens(1, 9, 3), [12, 5, 9], 12, CUDA)
    assert torch.equal(array.hidden[1, :, :, :5], alone.hidden[0])
    assert torch.equal(array.attention[1, :, :, :, :5, :5], alone.attention[0])
    assert not array.hidden[1, :, :, 5:].any()
