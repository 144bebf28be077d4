"""Tiny, randomly initialised models with real tokenizer files, for tests and offline checks.

Nothing here touches a model hub: every config is built in code and every tokenizer file is
written by hand, so the real loading paths (``AutoModel.from_pretrained(path)``) are exercised
without downloads. Shipped inside the package (as ``optuna.testing`` is) so tests, benchmarks and
the demo can share them.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainables.models.pretrained import minilm_path  # noqa: F401  (tests import it from here too)

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


def make_tiny_resnet(path: str | Path, dim: int = 16, image_size: int = 32, seed: int = 0) -> Path:
    """A random ResNetModel (pooled feature ``dim``) and its image processor, as a HF folder: a
    stand-in for ``microsoft/resnet-50`` (2048-d) in tests."""
    import torch
    from transformers import ConvNextImageProcessor, ResNetConfig, ResNetModel

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    cfg = ResNetConfig(embedding_size=8, hidden_sizes=[8, dim], depths=[1, 1],
                       layer_type="basic", downsample_in_first_stage=False)
    ResNetModel(cfg).save_pretrained(path)
    ConvNextImageProcessor(size={"shortest_edge": image_size}).save_pretrained(path)
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


# --- SentEval transfer tasks in their real formats --------------------------------------------
TRANSFER_CLASS_WORDS = {
    "binary": ("good", "bad"),  # label 1 file, label 0 file
    "TREC": ("abbr", "desc", "enty", "hum", "loc", "num"),
}
TRANSFER_FILLERS = ("the", "a", "film", "story", "it", "was", "very", "and", "of", "this", "plot",
                    "caf\u00e9", "na\u00efve")


def write_transfer_data(root: str | Path, n: int = 40, seed: int = 0, separable: bool = True) -> Path:
    """The seven SentEval transfer tasks as tiny files in SentEval's real formats, under ``root``.

    ``n`` samples per class and file (TREC: per coarse class; MRPC: per label). With
    ``separable`` a class word marks each sample's label (a bag-of-words probe can reach 100%);
    otherwise labels are drawn at random. Format details kept: MR, CR, SUBJ, MPQA and TREC are
    latin-1 ('café' as byte 0xe9 in MR and TREC), CR and MPQA hold an empty line (a sample),
    SST and MRPC are UTF-8, MRPC starts with a byte-order mark and its header line.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    root = Path(root)

    def sentence(word: str) -> str:
        k = int(rng.integers(1, 5))
        words = [str(w) for w in rng.choice(TRANSFER_FILLERS, size=k)]
        words.insert(int(rng.integers(0, k + 1)), word)
        return " ".join(words)

    def label(true: int, n_classes: int) -> int:
        return true if separable else int(rng.integers(0, n_classes))

    def write(rel: str, lines: list[str], encoding: str, bom: bool = False) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(("\ufeff" if bom else "").encode(encoding) + "".join(
            line + "\n" for line in lines).encode(encoding))

    pos, neg = TRANSFER_CLASS_WORDS["binary"]
    files = {"MR": ("rt-polarity.pos", "rt-polarity.neg"), "CR": ("custrev.pos", "custrev.neg"),
             "SUBJ": ("subj.objective", "subj.subjective"), "MPQA": ("mpqa.pos", "mpqa.neg")}
    for task, names in files.items():
        if separable:
            per_file = [[sentence(w) for _ in range(n)] for w in (pos, neg)]
        else:  # random words, the file (= the label) carries no signal
            per_file = [[sentence(str(rng.choice([pos, neg]))) for _ in range(n)] for _ in range(2)]
        if task in ("CR", "MPQA"):
            per_file[0][n // 2] = ""  # SentEval keeps empty lines as samples
        for name, lines in zip(names, per_file, strict=True):
            write(f"{task}/{name}", lines, "latin-1")
    for split, m in (("train", n), ("dev", max(4, n // 4)), ("test", max(4, n // 4))):
        lines = []
        for true, w in ((1, pos), (0, neg)):
            lines += [f"{sentence(w)}\t{label(true, 2)}" for _ in range(m)]
        write(f"SST/binary/sentiment-{split}", [str(x) for x in rng.permutation(lines)], "utf-8")
    coarse = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
    for name, m in (("train_5500.label", n), ("TREC_10.label", max(4, n // 4))):
        lines = []
        for true, w in enumerate(TRANSFER_CLASS_WORDS["TREC"]):
            lines += [f"{coarse[label(true, 6)]}:fine {sentence(w)}" for _ in range(m)]
        write(f"TREC/{name}", [str(x) for x in rng.permutation(lines)], "latin-1")
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    for name, m in (("msr_paraphrase_train.txt", n), ("msr_paraphrase_test.txt", max(4, n // 4))):
        lines = []
        for i in range(2 * m):
            true = i % 2
            a = sentence(str(rng.choice(TRANSFER_FILLERS)))
            b = a if true else sentence(str(rng.choice(TRANSFER_FILLERS)))
            lines.append(f"{label(true, 2)}\t{1000 + i}\t{2000 + i}\t{a}\t{b}")
        write(f"MRPC/{name}", [header, *lines], "utf-8", bom=True)
    return root


def word_vector_encoder(dim: int = 64, class_scale: float = 3.0):
    """A cheap deterministic encoder: the sum of fixed random word vectors (seeded by the word),
    the class words of ``write_transfer_data`` ``class_scale`` times longer, so the classes are
    linearly separable with a margin; an empty sentence is the zero vector. Dense, as real
    embeddings are: a probe trained the SentEval way learns it within its early-stopping budget.
    Fails loudly on anything but a list of str."""
    import zlib

    import numpy as np

    strong = set(TRANSFER_CLASS_WORDS["binary"]) | set(TRANSFER_CLASS_WORDS["TREC"])
    vectors: dict[str, np.ndarray] = {}

    def vector(word: str) -> np.ndarray:
        if word not in vectors:
            v = np.random.default_rng(zlib.crc32(word.encode("utf-8"))).normal(size=dim)
            vectors[word] = v * (class_scale if word in strong else 1.0)
        return vectors[word]

    def encode(sentences: list[str]) -> np.ndarray:
        out = np.zeros((len(sentences), dim))
        for r, s in enumerate(sentences):
            if not isinstance(s, str):
                raise TypeError(f"encode got {type(s).__name__}, expected str")
            for w in s.split():
                out[r] += vector(w)
        return out

    return encode
