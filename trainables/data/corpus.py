"""Text corpus (Wiki1M-style, one sentence per line) with random access, and the tokenising collator.

Why an index: the official loaders read all 10^6 lines into a Python list per process
(``[l.strip() for l in f.readlines()]``). Here the file is memory-mapped and a line-offset index
(``int64`` [start, end) byte pairs, built once in one vectorised pass and cached on disk, keyed by
the file's size + mtime) gives ``get(indices)`` without holding the strings.

Blank lines: MCSE/KDMCSE/DALR (``data.py::ImgSentDataset``) strip each line and **keep** blank
ones as ``""`` examples (tokenised to ``[CLS] [SEP]``); SimCSE's ``datasets`` text loader also
keeps empty lines. By default this corpus **skips** blank / whitespace-only lines (they carry no
signal and only dilute batches); ``skip_blank=False`` reproduces the official behaviour exactly.
``n_blank`` reports how many there were. Only ``\\n`` ends a line (``\\r\\n`` works via strip);
a lone ``\\r`` (which Python's universal newlines would also split on) does not.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from trainables.data.store import StoreError, cache_root

_CHUNK = 1 << 23  # bytes per pass step while indexing
MAX_LINE = 1 << 20
"""the longest line a corpus may have (bytes): one sentence per line is far shorter; a file
without line breaks would otherwise be read whole, slowly, into memory"""
_WS = np.zeros(256, dtype=bool)
_WS[[ord(c) for c in " \t\r\n\v\f"]] = True


def _index_chunk(buf: np.ndarray, base: int, skip_blank: bool) -> np.ndarray:
    """[start, end) byte offsets of the complete lines in ``buf`` (which ends with b"\\n")."""
    ends = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], ends[:-1] + 1))
    if skip_blank:
        content = np.flatnonzero(~_WS[buf])  # positions of non-whitespace bytes
        first = np.searchsorted(content, starts)  # first content byte at/after each start
        has = first < len(content)
        has[has] = content[first[has]] < ends[has]
        starts, ends = starts[has], ends[has]
    return np.stack([starts + base, ends + base], axis=1).astype(np.int64)


def build_line_index(path: str | os.PathLike, skip_blank: bool = True) -> tuple[np.ndarray, int]:
    """One pass over the file -> ((n, 2) int64 [start, end) offsets, number of lines in the file)."""
    path = Path(path)
    parts: list[np.ndarray] = []
    total = 0
    with open(path, "rb") as f:
        base, carry = 0, b""
        while True:
            data = f.read(_CHUNK)
            block = carry + data
            if not data:  # last line without a trailing newline still counts
                if block:
                    block += b"\n"
                else:
                    break
            cut = block.rfind(b"\n") + 1
            if cut:
                arr = np.frombuffer(block, dtype=np.uint8, count=cut)
                total += int(np.count_nonzero(arr == 10))
                parts.append(_index_chunk(arr, base, skip_blank))
            base += cut
            carry = block[cut:]
            if len(carry) > MAX_LINE:
                cr = b"\r" in carry[:MAX_LINE]
                raise StoreError(
                    f"{path}: the line at byte {base} runs past {MAX_LINE >> 20} MiB without a "
                    "line break; a text corpus holds one sentence per line"
                    + (" (this file breaks lines with \\r alone: convert it, e.g. tr '\\r' '\\n')"
                       if cr else "; check that this is the corpus file"))
            if not data:
                break
    index = np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
    return index, total


class TextCorpus:
    """Random access to the sentences of a one-sentence-per-line UTF-8 file."""

    def __init__(
        self,
        path: str | os.PathLike,
        skip_blank: bool = True,
        cache_dir: str | os.PathLike | None = None,
    ):
        self.path = Path(path)
        if not self.path.is_file():
            raise StoreError(f"{self.path}: text corpus not found (e.g. wiki1m_for_simcse.txt)")
        self.skip_blank = skip_blank
        self._index, self.n_lines = self._load_index(cache_dir)
        if len(self._index) == 0:
            raise StoreError(f"{self.path}: no non-blank lines; check the file")
        self.n_blank = self.n_lines - len(self._index) if skip_blank else 0
        with open(self.path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def _load_index(self, cache_dir) -> tuple[np.ndarray, int]:
        st = self.path.stat()
        tag = hashlib.sha1(str(self.path.resolve()).encode()).hexdigest()[:8]
        root = cache_root(self.path, cache_dir)
        name = f"{self.path.name}-{tag}-{st.st_size}-{st.st_mtime_ns}-{int(self.skip_blank)}.lines.npz"
        cached = root / name
        if cached.is_file():
            try:
                with np.load(cached) as z:
                    return z["index"], int(z["n_lines"])
            except (OSError, ValueError, KeyError):
                pass  # unreadable cache: rebuild below
        index, n_lines = build_line_index(self.path, self.skip_blank)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=root)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, index=index, n_lines=np.int64(n_lines))
            os.replace(tmp, cached)
        except OSError:
            Path(tmp).unlink(missing_ok=True)  # a cache we cannot write only costs a rebuild
        return index, n_lines

    def __len__(self) -> int:
        return len(self._index)

    def get(self, indices: Sequence[int] | np.ndarray) -> list[str]:
        """Sentences at ``indices`` (stripped, as the official loader's ``l.strip()``)."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self._index)):
            raise IndexError(f"{self.path}: index out of range [0, {len(self._index)})")
        out = []
        for s, e in self._index[idx].tolist():
            raw = self._mm[s:e]
            try:
                out.append(raw.decode("utf-8").strip())
            except UnicodeDecodeError:
                raise StoreError(
                    f"{self.path}: line at byte {s} is not UTF-8; re-encode the file as UTF-8"
                ) from None
        return out

    def close(self) -> None:
        self._mm.close()


class Tokenize:
    """Collator as the official ``data_collator``: truncation at ``max_length`` (32), padding to
    the longest sentence in the batch. Returns ``input_ids`` / ``attention_mask`` of shape
    (bs, len); the two dropout views (official: ``x.unsqueeze(1).repeat(1, 2, 1)``) are made by
    the encoder step. ``token_type_ids`` are dropped: the official forward never passes them.
    """

    def __init__(self, tokenizer, max_length: int = 32):
        if max_length < 2:
            raise ValueError(f"max_length={max_length}: need room for [CLS] and [SEP] (official: 32)")
        self.tokenizer = tokenizer
        self.max_length = max_length

    def __call__(self, sentences: Sequence[str]) -> dict:
        enc = self.tokenizer(
            list(sentences),
            max_length=self.max_length,
            truncation=True,
            padding="longest",
            return_tensors="pt",
        )
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    def pair(self, batch: dict) -> dict:
        """A ``FeatureStore.batch`` -> tokens of its captions + every feature array as a tensor."""
        import torch

        out = self(batch["caption"])
        for key, value in batch.items():
            if isinstance(value, np.ndarray):
                out[key] = torch.from_numpy(value)
            elif key != "caption":
                out[key] = value  # e.g. image_id: same-image captions can share a batch (KDMCSE)
        return out


def load_tokenizer(path: str | os.PathLike):
    """``AutoTokenizer(use_fast=True)`` from a local folder (nothing is fetched from a hub)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), use_fast=True, local_files_only=True)
