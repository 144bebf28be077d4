"""Tiny, randomly initialised models with real tokenizer files, for tests and offline checks.

Nothing here touches a model hub: every config is built in code and every tokenizer file is
written by hand, so the real loading paths (``AutoModel.from_pretrained(path)``) are exercised
without downloads. Shipped inside the package (as ``optuna.testing`` is) so tests, benchmarks and
the demo can share them.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainables.profiles import minilm_path  # noqa: F401  (tests import it from here too)

WORDS = ["a", "an", "the", "man", "woman", "child", "dog", "cat", "bird", "horse", "car", "bike", "boat", "ball", "tree", "house", "street", "park", "beach", "field", "snow", "water", "grass", "red", "blue", "green", "yellow", "black", "white", "small", "large", "young", "old", "two", "three", "four", "is", "are", "sits", "runs", "jumps", "walks", "rides", "plays", "eats", "holds", "looks", "stands", "near", "on", "in", "under", "with", "and", "of", "at", "by", "to", "from", "people", "group", "player", "team", "girl", "boy", "shirt", "hat", "dress", "city", "road", "table", "kitchen", "room", "sky", "sun", "night", "day", "food", "music", "guitar", "picture", "smiling", "happy", "playing", "running", "riding", "sitting"]


def _bert_vocab() -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'-")
    return specials + chars + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + WORDS


def write_bert_tokenizer(path: str | Path) -> Path:
    """Write a WordPiece vocab + tokenizer config that ``AutoTokenizer`` loads as BertTokenizerFast."""
    from transformers import BertTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = path / "vocab.txt"
    vocab.write_text("\n".join(_bert_vocab()) + "\n")
    BertTokenizerFast(vocab=str(vocab), do_lower_case=True).save_pretrained(path)
    return path


def write_bpe_tokenizer(path: str | Path, cls: str = "roberta") -> Path:
    """Write a byte-level BPE vocab/merges pair for RoBERTa (``cls='roberta'``) or CLIP (``'clip'``)."""
    from transformers import CLIPTokenizerFast, RobertaTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if cls == "roberta":
        specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        # Byte-level BPE marks a leading space with "Ġ"; every single byte symbol must exist.
        bytes_ = [chr(c) for c in range(33, 127)] + ["Ġ"]
        words = ["Ġ" + w for w in WORDS] + WORDS
        merges: list[str] = []
        vocab_list = specials + bytes_
        for w in sorted(set(words)):
            cur = w[0]
            for ch in w[1:]:
                merges.append(f"{cur} {ch}")
                cur = cur + ch
                vocab_list.append(cur)
        vocab = {tok: i for i, tok in enumerate(dict.fromkeys(vocab_list))}
        (path / "vocab.json").write_text(json.dumps(vocab))
        (path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(dict.fromkeys(merges)) + "\n")
        RobertaTokenizerFast(vocab=str(path / "vocab.json"), merges=str(path / "merges.txt")).save_pretrained(path)
    elif cls == "clip":
        specials = ["<|startoftext|>", "<|endoftext|>"]
        letters = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'-")
        vocab_list = letters + [c + "</w>" for c in letters]
        merges = []
        for w in sorted(set(WORDS)):
            cur = w[0]
            for i, ch in enumerate(w[1:], start=1):
                nxt = ch + "</w>" if i == len(w) - 1 else ch
                merges.append(f"{cur} {nxt}")
                cur = cur + nxt
                vocab_list.append(cur)
        vocab_list += specials
        vocab = {tok: i for i, tok in enumerate(dict.fromkeys(vocab_list))}
        (path / "vocab.json").write_text(json.dumps(vocab))
        (path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(dict.fromkeys(merges)) + "\n")
        CLIPTokenizerFast(vocab=str(path / "vocab.json"), merges=str(path / "merges.txt")).save_pretrained(path)
    else:
        raise ValueError(f"unknown tokenizer kind {cls!r}; use 'roberta' or 'clip'")
    return path


def make_tiny_bert(path: str | Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A random BertModel (hidden 32, 2 layers) and its tokenizer, saved as a HF folder."""
    import torch
    from transformers import BertConfig, BertModel

    path = write_bert_tokenizer(path)
    torch.manual_seed(seed)
    vocab_size = len(_bert_vocab())
    cfg = BertConfig(
        vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=4, intermediate_size=hidden * 2, max_position_embeddings=64,
    )
    BertModel(cfg).save_pretrained(path)
    return path


def make_tiny_distilbert(path: str | Path, dim: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A random DistilBertModel and its WordPiece tokenizer (no token_type_ids), as a HF folder:
    an encoder the stacked encoder cannot express (``trainables.arrays.looped``)."""
    import torch
    from transformers import DistilBertConfig, DistilBertModel, DistilBertTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = path / "vocab.txt"
    vocab.write_text("\n".join(_bert_vocab()) + "\n")
    DistilBertTokenizerFast(vocab=str(vocab), do_lower_case=True).save_pretrained(path)
    torch.manual_seed(seed)
    cfg = DistilBertConfig(vocab_size=len(_bert_vocab()), dim=dim, n_layers=layers, n_heads=4,
                           hidden_dim=dim * 2, max_position_embeddings=64, pad_token_id=0)
    DistilBertModel(cfg).save_pretrained(path)
    return path


def make_tiny_mpnet(path: str | Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A random MPNetModel (relative position buckets, positions after ``<pad>``) and its
    WordPiece tokenizer with MPNet's specials, as a HF folder: another encoder the stacked
    encoder cannot express."""
    import torch
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    words = ["<s>", "<pad>", "</s>", "[UNK]"] + _bert_vocab()[5:] + ["<mask>"]
    vocab = path / "vocab.txt"
    vocab.write_text("\n".join(words) + "\n")
    tok = MPNetTokenizerFast(vocab=str(vocab), do_lower_case=True)
    tok.save_pretrained(path)
    torch.manual_seed(seed)
    cfg = MPNetConfig(vocab_size=len(words), hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=4, intermediate_size=hidden * 2,
                      max_position_embeddings=66,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    MPNetModel(cfg).save_pretrained(path)
    return path


def make_tiny_roberta(path: str | Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A random RobertaModel and its byte-level BPE tokenizer, saved as a HF folder."""
    import torch
    from transformers import AutoTokenizer, RobertaConfig, RobertaModel

    path = write_bpe_tokenizer(path, "roberta")
    tok = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(seed)
    cfg = RobertaConfig(
        vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
        intermediate_size=hidden * 2, max_position_embeddings=66, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )
    RobertaModel(cfg).save_pretrained(path)
    return path


def make_tiny_clip(path: str | Path, dim: int = 16, image_size: int = 32, seed: int = 0) -> Path:
    """A random CLIPModel (projection ``dim``), its tokenizer and image processor, as a HF folder."""
    import torch
    from transformers import (
        AutoTokenizer,
        CLIPConfig,
        CLIPImageProcessor,
        CLIPModel,
    )

    path = write_bpe_tokenizer(path, "clip")
    tok = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(seed)
    cfg = CLIPConfig(
        text_config=dict(
            vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=77,
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id or tok.eos_token_id,
        ),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            image_size=image_size, patch_size=8,
        ),
        projection_dim=dim,
    )
    CLIPModel(cfg).save_pretrained(path)
    CLIPImageProcessor(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    ).save_pretrained(path)
    return path


def write_tiny_profile(folder: str | Path, encoder: str | Path, **settings) -> Path:
    """A profile YAML for fast end-to-end runs: a tiny encoder (also the DALR teacher), the demo
    corpus at 32-d features with its cache inside ``folder``; ``settings`` override run keys."""
    import yaml

    folder = Path(folder)
    profile = {
        "encoder": str(encoder), "text_teachers": [str(encoder)],
        "objective": {"teacher_weights": [1.0]},
        "data": {"demo": True, "demo_dim": 32, "cache_dir": str(folder / "cache")},
        "batch_size": 8, "max_steps": 6, "eval_every": 3, "eval_batch_size": 64,
        **settings,
    }
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(profile))
    return path
