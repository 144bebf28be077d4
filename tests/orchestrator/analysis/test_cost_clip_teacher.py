"""The cost estimate of a run with DALR's CLIP text teacher reads the text tower's sizes: a CLIP
config keeps them under ``text_config`` (``dalr_table9 --cells 'CLIP+CLIP'`` ended in
``AttributeError: 'CLIPConfig' object has no attribute 'hidden_size'``)."""

from __future__ import annotations

from transformers import CLIPConfig

from orchestrator.analysis.cost import Encoder


def test_a_clip_config_gives_its_text_towers_sizes():
    cfg = CLIPConfig(text_config={"hidden_size": 48, "num_hidden_layers": 3,
                                  "num_attention_heads": 4, "intermediate_size": 96,
                                  "vocab_size": 1000, "max_position_embeddings": 77},
                     vision_config={"hidden_size": 64, "num_hidden_layers": 2,
                                    "num_attention_heads": 2, "intermediate_size": 128})
    assert Encoder.from_config(cfg) == Encoder(48, 3, 4, 96, 1000, 77)
