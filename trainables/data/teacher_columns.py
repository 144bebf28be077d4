"""The text teachers' embeddings of every caption, precomputed once into the feature store.

DALR's S_T and F_T read each caption's pooled teacher embedding (``emb``), a fixed function of the
caption (``trainables.models.teachers`` says why); :func:`precompute_teacher_columns` stores it as
a ``teacher_<name>`` column, so training needs no teacher forward for them.

Precomputation is a plain batched loop, not Ray Data: it is one pass of a BERT-base forward over
the captions (about a minute per teacher on one GPU), and its result must land in the single
store file through ``add_columns``, which rewrites the file anyway; actors would add start-up,
a model load each and object-store copies for no gain.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from trainables.data.store import FeatureStore, StoreError, add_columns
from trainables.models.teachers import TeacherEnsemble, TextTeacher, as_tokenizer, check_same_vocab


def _provenance(t: TextTeacher, tokenizer_name: str, max_length: int) -> dict:
    return {
        "model": t.name_or_path, "kind": t.kind, "pooler": t.pooler, "dim": t.dim,
        "max_length": max_length, "retokenize": t.retokenize,
        "tokenizer": t.name_or_path if t.retokenize else tokenizer_name,
    }


def precompute_teacher_columns(
    store_path: str | Path,
    teachers: TeacherEnsemble | Sequence[TextTeacher],
    tokenizer,
    max_length: int = 32,
    batch_size: int = 256,
) -> Path:
    """Add one ``teacher_<name>`` column (each caption's ``emb``) per teacher to a store.

    ``tokenizer`` is the student's (ids are what the official teachers see); teachers built with
    ``retokenize=True`` use their own. A column that already exists from the same model, pooler,
    tokenizer and max_length is kept (re-running is a no-op); from anything else it is an error.
    """
    import pyarrow.parquet as pq

    teachers = teachers.teachers if isinstance(teachers, TeacherEnsemble) else tuple(teachers)
    store_path = Path(store_path)
    meta = FeatureStore(store_path).metadata  # validates the file first
    done = dict(meta.extra.get("columns", {}))
    tok = as_tokenizer(tokenizer)
    tok_name = str(getattr(tok, "name_or_path", "")) or type(tok).__name__
    captions = pq.read_table(store_path, columns=["caption"]).column("caption").to_pylist()
    # Sorting by length cuts padding; emb does not depend on padding (masked attention).
    order = np.argsort([len(c) for c in captions], kind="stable")
    new_cols, new_meta = {}, {}
    for t in teachers:
        col, prov = f"teacher_{t.name}", _provenance(t, tok_name, max_length)
        if col in done:
            if done[col] != prov:
                raise StoreError(
                    f"{store_path}: column {col!r} exists from {done[col]}, not {prov}; re-convert the "
                    "store or give this teacher another name="
                )
            continue
        if not t.retokenize:
            check_same_vocab(t.tokenizer, tok, t.name_or_path)
        out = np.empty((len(captions), t.dim), np.float32)
        for start in range(0, len(captions), batch_size):
            idx = order[start : start + batch_size]
            texts = [captions[i] for i in idx]
            ids = t.tokenize(texts, max_length) if t.retokenize else tok(
                texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"
            )
            out[idx] = t.encode_ids(ids["input_ids"], ids["attention_mask"])[0].cpu().numpy()
        new_cols[col], new_meta[col] = out, prov
    if not new_cols:
        return store_path
    return add_columns(store_path, new_cols, {"columns": {**done, **new_meta}})
