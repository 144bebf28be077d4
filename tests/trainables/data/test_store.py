"""Feature store: round trip, validation on write, clear errors on bad files, add_columns."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainables.data.store import FeatureStore, StoreError, StoreMetadata, add_columns, write_store

CLIP = "openai/clip-vit-large-patch14"


def _meta(dv=6, dt=4, **kw):
    return StoreMetadata(CLIP, dv, CLIP if dt else None, dt, normalized=False, **kw)


def _data(n=10, dv=6, dt=4, seed=0):
    rng = np.random.default_rng(seed)
    caps = [f"caption {i}" for i in range(n)]
    ids = [f"img{i // 2}" for i in range(n)]
    cols = {"image": rng.standard_normal((n, dv)).astype(np.float32)}
    if dt:
        cols["clip_text"] = rng.standard_normal((n, dt)).astype(np.float32)
    return caps, ids, cols


@pytest.fixture
def store(tmp_path):
    caps, ids, cols = _data()
    path = write_store(tmp_path / "s.parquet", caps, ids, cols, _meta())
    return path, caps, ids, cols


def test_round_trip_batch_matches_input_rows(store, tmp_path):
    path, caps, ids, cols = store
    fs = FeatureStore(path, cache_dir=tmp_path / "cache")
    assert len(fs) == 10
    assert fs.metadata == replace(_meta(), page_checksums=True)  # the writer sets it
    idx = np.array([7, 0, 7, 3])
    b = fs.batch(idx)
    assert b["caption"] == [caps[i] for i in idx]
    assert b["image_id"] == [ids[i] for i in idx]
    np.testing.assert_array_equal(b["image"], cols["image"][idx])
    np.testing.assert_array_equal(b["clip_text"], cols["clip_text"][idx])
    assert b["image"].dtype == np.float32 and b["image"].flags.writeable
    assert fs.feature_columns == ("image", "clip_text")
    assert (fs.dim("image"), fs.dim("clip_text")) == (6, 4)


def entries(cache):
    """Cache entries and leftovers, without the builders' lock file (trainables.runtime.filelock)."""
    return sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock"))


def test_features_are_memory_mapped_and_cache_is_reused(store, tmp_path):
    path, *_ = store
    fs = FeatureStore(path, cache_dir=tmp_path / "cache")
    assert isinstance(fs.column("image"), np.memmap)
    built = entries(tmp_path / "cache")
    FeatureStore(path, cache_dir=tmp_path / "cache")  # second open reuses the entry
    assert entries(tmp_path / "cache") == built
    assert len(built) == 1 and not built[0].startswith(".")  # no temp dir left behind


def test_float64_input_is_stored_as_float32(tmp_path):
    caps, ids, cols = _data(dt=0)
    cols["image"] = cols["image"].astype(np.float64)
    path = write_store(tmp_path / "s.parquet", caps, ids, cols, _meta(dt=None))
    b = FeatureStore(path).batch(np.arange(10))
    np.testing.assert_allclose(b["image"], cols["image"], rtol=1e-6)
    assert "clip_text" not in b


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c, i, k: c.__setitem__(3, "  "), "row 3"),
        (lambda c, i, k: i.pop(), "image ids"),
        (lambda c, i, k: k.__setitem__("image", k["image"][:9]), "9 rows"),
        (lambda c, i, k: k["clip_text"].__setitem__((5, 1), np.nan), "row 5"),
        (lambda c, i, k: k["image"].__setitem__((8, 0), np.inf), "'image': NaN/inf in row 8"),
        (lambda c, i, k: k.__setitem__("image", k["image"][:, :5]), "image_dim is 6"),
        (lambda c, i, k: k.__setitem__("image", k["image"].reshape(-1)), "2-D"),
        (lambda c, i, k: k.__setitem__("image", np.zeros((10, 6), np.int32)), "floats"),
        (lambda c, i, k: k.pop("clip_text"), "no 'clip_text' column"),
    ],
)
def test_write_refuses_bad_input_and_leaves_nothing(tmp_path, mutate, message):
    caps, ids, cols = _data()
    mutate(caps, ids, cols)
    with pytest.raises(StoreError, match=message):
        write_store(tmp_path / "s.parquet", caps, ids, cols, _meta())
    assert os.listdir(tmp_path) == []


def test_failed_write_keeps_previous_file(store):
    path, caps, ids, cols = store
    before = path.read_bytes()
    bad = dict(cols, image=np.full((10, 6), np.nan, np.float32))
    with pytest.raises(StoreError):
        write_store(path, caps, ids, bad, _meta())
    assert path.read_bytes() == before


def test_truncated_file_is_named_with_fix(store, tmp_path):
    path, *_ = store
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(StoreError, match=r"s\.parquet.*corrupt or truncated.*trainables\.convert"):
        FeatureStore(path)


def _foreign(path, out, **columns):
    """The store at ``path`` rewritten by another tool: ``columns`` replaced, our metadata kept
    (minus the checksum flag), no page checksums; as a store written before them looks."""
    table = pq.read_table(path)
    for name, values in columns.items():
        i = table.column_names.index(name)
        table = table.set_column(i, name, values)
    meta = table.schema.metadata[b"mmemb"].replace(b'"page_checksums": true', b'"page_checksums": false')
    pq.write_table(table.replace_schema_metadata({b"mmemb": meta}), out)
    return out


def test_nan_row_written_by_another_tool_is_refused_on_read(store, tmp_path):
    path, caps, ids, cols = store
    img = cols["image"].copy()
    img[7, 2] = np.nan
    bad = _foreign(path, tmp_path / "nan.parquet",
                   image=pa.FixedSizeListArray.from_arrays(pa.array(img.reshape(-1)), 6))
    with pytest.raises(StoreError, match=r"nan\.parquet: column 'image': NaN/inf in row 7 .*convert"):
        FeatureStore(bad, cache_dir=tmp_path / "cache")
    assert entries(tmp_path / "cache") == []  # nothing half-validated is left to be reused


def test_empty_caption_is_refused_on_read(store, tmp_path):
    path, caps, *_ = store
    bad = _foreign(path, tmp_path / "blank.parquet",
                   caption=pa.array([*caps[:4], "  ", *caps[5:]], pa.string()))
    with pytest.raises(StoreError, match=r"blank\.parquet: empty caption in row 4 \(1 empty\)"):
        FeatureStore(bad, cache_dir=tmp_path / "cache")


def _overwrite_middle(path, out, n=4096):
    """4 KB of noise in the middle of the file, footer intact."""
    raw = bytearray(path.read_bytes())
    mid = len(raw) // 2
    raw[mid : mid + n] = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8).tobytes()
    out.write_bytes(bytes(raw))
    return out


def test_page_overwritten_in_the_middle_fails_its_checksum(tmp_path):
    n, dim = 4000, 64  # ~2 MB: the 4 KB land inside a feature page
    rng = np.random.default_rng(0)
    cols = {"image": rng.standard_normal((n, dim)).astype(np.float32),
            "clip_text": rng.standard_normal((n, dim)).astype(np.float32)}
    path = write_store(tmp_path / "s.parquet", [f"c {i}" for i in range(n)],
                       [str(i) for i in range(n)], cols, _meta(dim, dim))
    bad = _overwrite_middle(path, tmp_path / "hit.parquet")
    assert pq.ParquetFile(bad).metadata.num_rows == n  # the footer still reads
    with pytest.raises(StoreError, match=r"hit\.parquet: a page fails its checksum.*convert"):
        FeatureStore(bad, cache_dir=tmp_path / "cache")
    assert FeatureStore(path, cache_dir=tmp_path / "cache").metadata.page_checksums


def test_store_without_checksums_still_opens_and_says_so(store, tmp_path):
    """Stores written before page checksums: read (NaN/empty checks still apply), flagged so
    callers can warn (orchestrator.run.preflight does)."""
    path, *_ = store
    old = _foreign(path, tmp_path / "old.parquet")
    fs = FeatureStore(old, cache_dir=tmp_path / "cache")
    assert fs.metadata.page_checksums is False and len(fs) == 10


def test_parquet_without_our_metadata_is_refused(tmp_path):
    path = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"caption": ["a"], "image_id": ["x"]}), path)
    with pytest.raises(StoreError, match="foreign.parquet.*no mmemb metadata"):
        FeatureStore(path)


def test_missing_file_and_wrong_format_version(tmp_path, store):
    with pytest.raises(StoreError, match="not found"):
        FeatureStore(tmp_path / "nope.parquet")
    path, *_ = store
    table = pq.read_table(path)
    raw = table.schema.metadata[b"mmemb"].replace(b'"format_version": 1', b'"format_version": 99')
    pq.write_table(table.replace_schema_metadata({b"mmemb": raw}), tmp_path / "v99.parquet")
    with pytest.raises(StoreError, match="format_version 99"):
        FeatureStore(tmp_path / "v99.parquet")


def test_batch_index_out_of_range(store):
    fs = FeatureStore(store[0])
    with pytest.raises(StoreError, match="out of range"):
        fs.batch(np.array([10]))


def test_add_columns_appends_and_invalidates_cache(store, tmp_path):
    path, caps, ids, cols = store
    cache = tmp_path / "cache"
    FeatureStore(path, cache_dir=cache)
    teacher = np.arange(30, dtype=np.float32).reshape(10, 3)
    add_columns(path, {"teacher_simcse": teacher}, {"teachers": {"teacher_simcse": "simcse-bert"}})
    fs = FeatureStore(path, cache_dir=cache)
    assert fs.metadata.extra == {"teachers": {"teacher_simcse": "simcse-bert"}}
    b = fs.batch(np.array([2, 9]))
    np.testing.assert_array_equal(b["teacher_simcse"], teacher[[2, 9]])
    np.testing.assert_array_equal(b["image"], cols["image"][[2, 9]])  # old columns intact
    assert len(entries(cache)) == 1  # the stale cache entry was removed


def test_add_columns_refuses_duplicates_and_bad_rows(store):
    path, *_ = store
    before = path.read_bytes()
    with pytest.raises(StoreError, match="already exists"):
        add_columns(path, {"image": np.zeros((10, 6), np.float32)})
    with pytest.raises(StoreError, match="4 rows"):
        add_columns(path, {"teacher_x": np.zeros((4, 3), np.float32)})
    with pytest.raises(StoreError, match="row 1"):
        add_columns(path, {"teacher_x": np.array([[0.0], [np.nan]] * 5, np.float32)})
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["s.parquet"]


def test_cache_dir_from_environment(store, tmp_path, monkeypatch):
    path, *_ = store
    monkeypatch.setenv("MMEMB_CACHE_DIR", str(tmp_path / "envcache"))
    FeatureStore(path)
    assert len(entries(tmp_path / "envcache")) == 1
    assert not (path.parent / ".mmemb-cache").exists()
