"""Teacher columns precomputed into a store equal the teachers run on the fly; re-running is a no-op."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.trainables.models.test_teachers import CAPTIONS, _ids
from trainables.data.store import FeatureStore, StoreError, StoreMetadata, write_store
from trainables.data.teacher_columns import precompute_teacher_columns
from trainables.models.teachers import TeacherEnsemble, TextTeacher


def _store(path):
    n = len(CAPTIONS)
    rng = np.random.default_rng(0)
    meta = StoreMetadata(image_teacher="test", image_dim=8, text_teacher=None, text_dim=None, normalized=False)
    return write_store(path, CAPTIONS, [f"i{k}" for k in range(n)], {"image": rng.normal(size=(n, 8))}, meta)


def test_precomputed_columns_equal_on_the_fly(tiny_bert, bert_b, tiny_clip, tmp_path):
    path = _store(tmp_path / "s.parquet")
    a = TextTeacher(tiny_bert, device="cpu", name="simcse")  # "tiny-bert..." path: avg pooler
    b = TextTeacher(bert_b, device="cpu", name="diffcse")
    c = TextTeacher(tiny_clip, device="cpu", name="clip", retokenize=True)
    ens = TeacherEnsemble([a, b, c], (0.3, 0.6, 0.1))
    precompute_teacher_columns(path, ens, tiny_bert, max_length=32, batch_size=3)
    store = FeatureStore(path)
    assert {"teacher_simcse", "teacher_diffcse", "teacher_clip"} <= set(store.feature_columns)
    cols = store.metadata.extra["columns"]
    # the pooler rule read the folder names ("DiffCSE-tiny..." for bert_b); clip uses its projection
    assert [cols[f"teacher_{n}"]["pooler"] for n in ("simcse", "diffcse", "clip")] == [
        "avg", "cls_before_pooler", "projection"]

    # a training-style batch: other rows, other padding length than any precompute batch
    idx = np.array([6, 1, 3, 0])
    batch = store.batch(idx)
    texts = [CAPTIONS[i] for i in idx]
    tok = _ids(tiny_bert, texts)
    live = ens.embeddings(tok["input_ids"], tok["attention_mask"], texts=texts)
    for pre, now in zip(ens.precomputed(batch), live, strict=True):
        torch.testing.assert_close(pre, now, rtol=1e-5, atol=1e-5)

    # re-running with the same teachers is a no-op; a different model under the same name is refused
    before = path.stat().st_mtime_ns
    precompute_teacher_columns(path, ens, tiny_bert)
    assert path.stat().st_mtime_ns == before
    with pytest.raises(StoreError, match="column 'teacher_simcse' exists"):
        precompute_teacher_columns(path, [TextTeacher(bert_b, device="cpu", name="simcse")], tiny_bert)


def test_precompute_refuses_vocab_mismatch(tiny_bert, tiny_roberta, tmp_path):
    path = _store(tmp_path / "s.parquet")
    with pytest.raises(ValueError, match="does not share the student's vocabulary"):
        precompute_teacher_columns(path, [TextTeacher(tiny_roberta, device="cpu")], tiny_bert)
    assert "teacher_" not in " ".join(FeatureStore(path).feature_columns)
