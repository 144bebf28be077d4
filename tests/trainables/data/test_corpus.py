"""Text corpus line index and the tokenising collator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import trainables.data.corpus as corpus_mod
from trainables.data.corpus import TextCorpus, Tokenize, build_line_index, load_tokenizer
from trainables.data.store import FeatureStore, StoreError, StoreMetadata, write_store

RAW = "first line\n\n  second, with spaces  \r\n   \nthird ünïcödé\n\t\nlast without newline"


def _reference(text: str, skip_blank: bool) -> list[str]:
    """What the official loader reads ([l.strip() for l in readlines()]), optionally minus blanks."""
    lines = [line.strip() for line in text.split("\n")]
    if text.endswith("\n"):
        lines.pop()
    return [s for s in lines if s] if skip_blank else lines


@pytest.mark.parametrize("skip_blank", [True, False])
@pytest.mark.parametrize("text", [RAW, RAW + "\n", "only\n", "x"])
def test_corpus_matches_reference_reader(tmp_path, text, skip_blank):
    path = tmp_path / "wiki.txt"
    path.write_bytes(text.encode("utf-8"))
    c = TextCorpus(path, skip_blank=skip_blank, cache_dir=tmp_path / "cache")
    expect = _reference(text, skip_blank)
    assert len(c) == len(expect)
    assert c.get(range(len(c))) == expect
    rev = np.arange(len(c))[::-1]
    assert c.get(rev) == [expect[i] for i in rev]
    assert c.n_lines == len(_reference(text, False))
    assert c.n_blank == (c.n_lines - len(expect) if skip_blank else 0)


def test_index_is_chunk_size_independent(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    words = ["a", "bb", "ccc", " ", "", "\t"]
    text = "\n".join("".join(rng.choice(words, rng.integers(0, 6))) for _ in range(400))
    path = tmp_path / "t.txt"
    path.write_text(text)
    full, n_full = build_line_index(path)
    monkeypatch.setattr(corpus_mod, "_CHUNK", 5)  # lines straddle chunk boundaries
    small, n_small = build_line_index(path)
    np.testing.assert_array_equal(full, small)
    assert n_full == n_small == len(_reference(text, False))
    c = TextCorpus(path, cache_dir=tmp_path / "c")
    assert c.get(range(len(c))) == _reference(text, True)


def test_index_cache_is_reused_and_refreshed_on_change(tmp_path, monkeypatch):
    path = tmp_path / "w.txt"
    path.write_text("a\nb\n")
    cache = tmp_path / "cache"
    assert len(TextCorpus(path, cache_dir=cache)) == 2
    calls = []
    real = corpus_mod.build_line_index
    monkeypatch.setattr(corpus_mod, "build_line_index", lambda *a: calls.append(1) or real(*a))
    assert len(TextCorpus(path, cache_dir=cache)) == 2
    assert calls == []  # served from the cache
    path.write_text("a\nb\nc\n")  # size (and mtime) change -> new key
    assert TextCorpus(path, cache_dir=cache).get([2]) == ["c"]
    assert calls == [1]


def test_corpus_errors(tmp_path):
    with pytest.raises(StoreError, match="not found"):
        TextCorpus(tmp_path / "missing.txt")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    with pytest.raises(StoreError, match="no non-blank lines"):
        TextCorpus(blank)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"ok\ncaf\xe9\n")
    c = TextCorpus(bad)
    with pytest.raises(StoreError, match="not UTF-8"):
        c.get([1])
    with pytest.raises(IndexError):
        c.get([2])


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from trainables.testing import write_bert_tokenizer

    return load_tokenizer(write_bert_tokenizer(tmp_path_factory.mktemp("tok")))


def test_tokenize_truncates_and_pads_to_longest(tok):
    sents = ["a", "the cat sat on the mat " * 10]
    out = Tokenize(tok, max_length=8)(sents)
    assert set(out) == {"input_ids", "attention_mask"}
    assert out["input_ids"].shape == (2, 8)  # longest is truncated to max_length
    # reference: the tokenizer alone, no padding; then pad by hand
    ids = [tok(s, max_length=8, truncation=True)["input_ids"] for s in sents]
    assert out["input_ids"][1].tolist() == ids[1]
    assert out["input_ids"][0, : len(ids[0])].tolist() == ids[0]
    assert out["attention_mask"].tolist()[0] == [1] * len(ids[0]) + [0] * (8 - len(ids[0]))
    short = Tokenize(tok)(["a b", "a"])
    assert short["input_ids"].shape[1] == len(tok("a b")["input_ids"])  # padding only to the longest


def test_tokenize_pair_batch_from_store(tok, tmp_path):
    feats = np.arange(12, dtype=np.float32).reshape(3, 4)
    meta = StoreMetadata("demo-scene", 4, None, None, normalized=False)
    path = write_store(tmp_path / "s.parquet", ["a cat", "a dog", "the sun"], ["0", "1", "2"],
                       {"image": feats}, meta)
    batch = FeatureStore(path).batch(np.array([2, 0]))
    out = Tokenize(tok).pair(batch)
    assert torch.equal(out["image"], torch.from_numpy(feats[[2, 0]]))
    assert out["image"].dtype == torch.float32
    assert torch.equal(out["input_ids"], Tokenize(tok)(["the sun", "a cat"])["input_ids"])
    assert out["image_id"] == ["2", "0"] and "caption" not in out


def test_a_file_without_line_breaks_is_refused_at_once_not_read_whole(tmp_path):
    """Issue 31: a 2 GB file with no newline kept the dry run silent for minutes (each chunk was
    joined to the growing line); now the first MiB without a break is enough to refuse it."""
    from trainables.data.corpus import MAX_LINE, TextCorpus
    from trainables.data.store import StoreError

    blob = tmp_path / "dump.bin"
    blob.write_bytes(b"x" * (3 * MAX_LINE))
    with pytest.raises(StoreError, match=r"dump.bin: the line at byte 0 runs past 1 MiB without "
                                         r"a line break.*check that this is the corpus file"):
        TextCorpus(blob, cache_dir=tmp_path / "cache")
    mac = tmp_path / "mac.txt"
    mac.write_bytes(b"a sentence .\r" * (MAX_LINE // 8))
    with pytest.raises(StoreError, match=r"breaks lines with \\r alone"):
        TextCorpus(mac, cache_dir=tmp_path / "cache")
