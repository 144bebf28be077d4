"""Feature store: one Parquet file holding captions, image ids and frozen teacher features.

Why one file: MCSE ships captions (text) + ResNet features (HDF5), KDMCSE/DALR ship CLIP JSONs
(image_feat + lang_feat per caption). Both are converted (``trainables.convert``) into one
row-per-(caption, image) table so the training loop has a single, validated, memory-mapped reader.

Layout (one row per pair):
  - ``caption``   string, non-empty
  - ``image_id``  string
  - ``image``     fixed_size_list<float32>[Dv]   image-teacher feature (ResNet-50 2048-d, CLIP 768-d)
  - ``clip_text`` fixed_size_list<float32>[Dt]   optional CLIP text feature of the caption
  - ``resnet`` / ``teacher_<name>``              optional extra fixed-size float32 columns
File-level metadata (:class:`StoreMetadata`) is JSON under the schema-metadata key ``b"mmemb"``.

Reading: Parquet pages must be decoded, so Parquet itself cannot be mapped zero-copy. The
reader therefore decodes the feature columns once into raw ``.npy`` files (a cache keyed by the
store's size + mtime, beside the store by default) and memory-maps those; a random batch is then
one numpy gather per column, no per-row Python, and all trial processes on a node share the pages
(see ``bench/store_read.py`` for the measured rate).

Integrity: the writer refuses NaN/inf features and empty captions, and writes a CRC32 checksum
with every Parquet page (``StoreMetadata.page_checksums``). The reader checks the same, cheaply:
pages are verified and values checked for NaN/inf while the cache is decoded (once per store
version), captions at every open. A page overwritten in the middle of a file, with its footer
intact, therefore fails with one line instead of decoding to garbage rows.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trainables.runtime.filelock import file_lock
from trainables.runtime.modes import as_created

FORMAT_VERSION = 1
META_KEY = b"mmemb"
CACHE_VERSION = 2
"""bumped when the decoder checks more: entries decoded by an older, laxer reader are not reused"""
STRING_COLUMNS = ("caption", "image_id")
REQUIRED_FEATURES = ("image",)


class StoreError(ValueError):
    """A feature store (or the data about to be written into one) is invalid."""


@dataclass(frozen=True)
class StoreMetadata:
    """What produced the features of a store, so a run can refuse a mismatched teacher."""

    image_teacher: str
    """e.g. "openai/clip-vit-large-patch14", "resnet50", "demo-scene" """
    image_dim: int
    text_teacher: str | None
    """CLIP model that made the "clip_text" column; None if the column is absent"""
    text_dim: int | None
    normalized: bool
    """whether stored features are L2-normalised (official CLIP JSONs and ResNet HDF5: False)"""
    extra: dict = field(default_factory=dict)
    """json-able extras, e.g. {"teacher_simcse": {"model": ..., "dim": ...}} for added columns"""
    page_checksums: bool = False
    """set by the writer: every page carries a CRC32 (stores written before it have none)"""

    def to_json(self) -> str:
        return json.dumps({"format_version": FORMAT_VERSION, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "<store>") -> StoreMetadata:
        try:
            raw = json.loads(text)
            version = raw.pop("format_version")
            if version != FORMAT_VERSION:
                raise StoreError(
                    f"{source}: store format_version {version}, this code reads {FORMAT_VERSION}; "
                    "re-convert the data with python -m trainables.convert"
                )
            return cls(**raw)
        except StoreError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(
                f"{source}: unreadable mmemb metadata ({exc}); re-convert with python -m trainables.convert"
            ) from None


def _feature_matrix(path: Path, name: str, array: np.ndarray) -> np.ndarray:
    """Validate one feature column: 2-D, float, finite. Returns a C-contiguous float32 copy/view."""
    arr = np.asarray(array)
    if arr.ndim != 2:
        raise StoreError(f"{path}: column {name!r}: expected a 2-D (rows, dim) array, got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise StoreError(f"{path}: column {name!r}: expected floats, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        raise StoreError(
            f"{path}: column {name!r}: NaN/inf in row {int(np.argmax(bad))} ({int(bad.sum())} bad "
            "rows); fix or drop those rows before writing"
        )
    return arr


def _fixed_list(arr: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1), pa.float32()), arr.shape[1])


def _check_dims(meta: StoreMetadata, dims: Mapping[str, int], source: str) -> None:
    """Metadata and feature columns must agree (the teacher dims are what the heads are built from)."""
    for name in REQUIRED_FEATURES:
        if name not in dims:
            raise StoreError(f"{source}: missing required feature column {name!r}")
    if dims["image"] != meta.image_dim:
        raise StoreError(
            f"{source}: column 'image' has dim {dims['image']} but metadata image_dim is "
            f"{meta.image_dim}; re-create the store (python -m trainables.convert) with "
            "StoreMetadata.image_dim equal to the CLIP model's projection size"
        )
    if "clip_text" in dims:
        if meta.text_dim != dims["clip_text"] or meta.text_teacher is None:
            raise StoreError(
                f"{source}: column 'clip_text' has dim {dims['clip_text']} but metadata says "
                f"text_teacher={meta.text_teacher!r}, text_dim={meta.text_dim}; re-create the store "
                "(python -m trainables.convert) with matching StoreMetadata.text_dim"
            )
    elif meta.text_dim is not None or meta.text_teacher is not None:
        raise StoreError(
            f"{source}: metadata names text teacher {meta.text_teacher!r} but there is no "
            "'clip_text' column; set text_teacher/text_dim to None or add the column"
        )


def _atomic_write_table(table: pa.Table, path: Path) -> Path:
    try:  # a missing output folder is created, as users expect of --out
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise StoreError(f"{path}: cannot write there ({exc.strerror}: {exc.filename}); choose a "
                         "writable output folder") from None
    os.close(fd)
    as_created(tmp)  # mkstemp's 0600 would keep the store from a group sharing the data folder
    try:
        # No compression: feature floats barely compress and uncompressed pages read faster.
        # Page CRCs: a page corrupted later (a bad disk, a partial copy) fails at decode.
        pq.write_table(table, tmp, compression="none", use_dictionary=False,
                       row_group_size=1 << 20, write_page_checksum=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_store(
    path: str | os.PathLike,
    captions: Sequence[str],
    image_ids: Sequence[str],
    columns: Mapping[str, np.ndarray],
    metadata: StoreMetadata,
) -> Path:
    """Validate and atomically write a store; returns its path. Nothing is left on failure."""
    path = Path(path)
    n = len(captions)
    if n == 0:
        raise StoreError(f"{path}: no rows to write; check the converter's input files")
    if len(image_ids) != n:
        raise StoreError(f"{path}: {n} captions but {len(image_ids)} image ids; they must be row-aligned")
    for i, cap in enumerate(captions):
        if not isinstance(cap, str) or not cap.strip():
            raise StoreError(f"{path}: empty or non-string caption in row {i} ({cap!r}); drop that row")
    for name in columns:
        if name in STRING_COLUMNS:
            raise StoreError(f"{path}: {name!r} is a reserved string column, not a feature column")
    mats = {name: _feature_matrix(path, name, arr) for name, arr in columns.items()}
    for name, arr in mats.items():
        if arr.shape[0] != n:
            raise StoreError(f"{path}: column {name!r} has {arr.shape[0]} rows but there are {n} captions")
    _check_dims(metadata, {k: v.shape[1] for k, v in mats.items()}, str(path))
    fields = {
        "caption": pa.array(list(captions), pa.string()),
        "image_id": pa.array([str(x) for x in image_ids], pa.string()),
    }
    fields.update({name: _fixed_list(arr) for name, arr in mats.items()})
    meta = replace(metadata, page_checksums=True)
    table = pa.table(fields).replace_schema_metadata({META_KEY: meta.to_json().encode()})
    return _atomic_write_table(table, path)


def _open_schema(path: Path) -> tuple[pq.ParquetFile, StoreMetadata]:
    """Open the Parquet footer and our metadata, with one clear error for every way it can fail."""
    if not path.is_file():
        raise StoreError(f"{path}: feature store not found; build it with python -m trainables.convert")
    try:
        pf = pq.ParquetFile(str(path), memory_map=True, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as exc:
        raise StoreError(
            f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]}); the file is corrupt "
            "or truncated, re-create it with python -m trainables.convert"
        ) from None
    raw = (pf.schema_arrow.metadata or {}).get(META_KEY)
    if raw is None:
        raise StoreError(
            f"{path}: Parquet file has no mmemb metadata (not written by trainables.data.store); "
            "convert the data with python -m trainables.convert"
        )
    return pf, StoreMetadata.from_json(raw, str(path))


def _read_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(str(path), columns=columns, memory_map=True,
                             page_checksum_verification=True)
    except (pa.ArrowException, OSError) as exc:
        raise StoreError(
            f"{path}: Parquet data unreadable ({str(exc).splitlines()[0]}); the file is corrupt, "
            "re-create it with python -m trainables.convert"
        ) from None


def cache_root(path: Path, cache_dir: str | os.PathLike | None) -> Path:
    """First writable of: ``cache_dir``, $MMEMB_CACHE_DIR, ``.mmemb-cache/`` beside, ~/.cache/mmemb."""
    for root in (cache_dir, os.environ.get("MMEMB_CACHE_DIR"), path.parent / ".mmemb-cache"):
        if root is None:
            continue
        try:
            Path(root).mkdir(parents=True, exist_ok=True)
            if os.access(root, os.W_OK):
                return Path(root)
        except OSError:
            pass
    root = Path.home() / ".cache" / "mmemb" / "stores"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _feature_cache(
    path: Path, pf: pq.ParquetFile, names: list[str], cache_dir: str | os.PathLike | None
) -> dict[str, np.ndarray]:
    """Decode the feature columns once into ``<col>.npy`` files and memory-map those.

    Why: Parquet pages must be *decoded*, so ``pq.read_table(memory_map=True)`` still copies
    every float into process memory (bench/README.md, "store_read.py"). A
    raw ``.npy`` copy is mapped zero-copy, opens instantly, and is shared through the page cache
    by every trial process on the node. Keyed by the store's size + mtime, so a rewritten store
    (``add_columns``, re-conversion) gets a fresh cache.
    """
    st = path.stat()
    tag = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    root = cache_root(path, cache_dir)
    entry = root / f"{path.name}-{tag}-{st.st_size}-{st.st_mtime_ns}-c{CACHE_VERSION}"
    if not (entry / "complete").is_file():
        with file_lock(root / f".{path.name}-{tag}.lock"):  # one decoder per store at a time
            if not (entry / "complete").is_file():
                _decode_into(entry, root, path, pf, names, tag)
    return {c: np.load(entry / f"{c}.npy", mmap_mode="r") for c in names}


def _decode_into(entry: Path, root: Path, path: Path, pf: pq.ParquetFile, names: list[str],
                 tag: str) -> None:
    """Build the decoded cache of ``path`` under ``entry`` (caller holds the lock)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=root))
    try:
        n = pf.metadata.num_rows
        mats = {}
        for c in names:
            dim = pf.schema_arrow.field(c).type.list_size
            mats[c] = np.lib.format.open_memmap(tmp / f"{c}.npy", "w+", np.float32, (n, dim))
        row = 0
        for rb in pf.iter_batches(batch_size=1 << 16, columns=names, use_threads=True):
            for c in names:
                flat = rb.column(c).flatten().to_numpy(zero_copy_only=False)
                block = flat.reshape(rb.num_rows, -1)
                _check_finite(path, c, block, row)
                mats[c][row : row + rb.num_rows] = block
            row += rb.num_rows
        if row != n:
            raise StoreError(f"{path}: footer says {n} rows, data has {row}; re-create the store")
        for m in mats.values():
            m.flush()
        del mats
        pa.default_memory_pool().release_unused()  # give the decode buffers back
        (tmp / "complete").touch()
        try:
            os.rename(tmp, entry)  # atomic; loses cleanly to a concurrent builder
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    except (pa.ArrowException, OSError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        why = str(exc).splitlines()[0]
        if "checksum" in why.lower():
            raise StoreError(f"{path}: a page fails its checksum ({why}); the file is corrupt "
                             "(a bad disk or copy): re-create it with python -m trainables.convert"
                             ) from None
        raise StoreError(
            f"{path}: could not decode features ({why}); the file is "
            "corrupt or the cache dir is full, re-create the store or set MMEMB_CACHE_DIR"
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # Stale entries of this store (older size/mtime); a reader still mapping one keeps it alive.
    # Temp dirs of builders killed mid-way (an hour old) go too.
    for old in [*root.glob(f"{path.name}-{tag}-*"), *root.glob(f".{path.name}-{tag}-*")]:
        with contextlib.suppress(OSError):  # another process may be removing it too
            stale = not old.name.startswith(".") or time.time() - old.stat().st_mtime > 3600
            if old != entry and stale and not old.name.endswith(".lock"):
                shutil.rmtree(old, ignore_errors=True)



def _check_finite(path: Path, column: str, block: np.ndarray, first_row: int) -> None:
    """The writer's NaN/inf refusal, on read (a store written by other tools, or a bad copy)."""
    bad = ~np.isfinite(block).all(axis=1)
    if bad.any():
        raise StoreError(
            f"{path}: column {column!r}: NaN/inf in row {first_row + int(np.argmax(bad))} "
            f"({int(bad.sum())} bad rows in that block); re-create the store with python -m "
            "trainables.convert, which refuses such rows"
        )


def _check_captions(path: Path, captions: pa.ChunkedArray) -> None:
    """The writer's empty-caption refusal, on read: a blank caption trains on nothing."""
    import pyarrow.compute as pc

    blank = pc.or_(pc.is_null(captions), pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(captions)), 0))
    if pc.any(blank).as_py():
        row = pc.index(blank, True).as_py()
        raise StoreError(
            f"{path}: empty caption in row {row} ({pc.sum(blank).as_py()} empty); drop those rows "
            "and re-create the store with python -m trainables.convert"
        )


class FeatureStore:
    """Read side: feature columns memory-mapped, random batches by index (a numpy gather).

    ``cache_dir``: where the decoded ``.npy`` copy of the features lives (else
    ``$MMEMB_CACHE_DIR``, else ``.mmemb-cache/`` beside the store, else ``~/.cache/mmemb``).
    """

    def __init__(self, path: str | os.PathLike, cache_dir: str | os.PathLike | None = None):
        self.path = Path(path)
        pf, self.metadata = _open_schema(self.path)
        schema = pf.schema_arrow
        for name in (*STRING_COLUMNS, *REQUIRED_FEATURES):
            if name not in schema.names:
                raise StoreError(f"{self.path}: missing column {name!r}; re-create the store")
        feats = [n for n in schema.names if n not in STRING_COLUMNS]
        for name in feats:
            t = schema.field(name).type
            if not pa.types.is_fixed_size_list(t) or t.value_type != pa.float32():
                raise StoreError(
                    f"{self.path}: column {name!r} has type {t}, expected fixed_size_list<float>"
                )
        dims = {n: schema.field(n).type.list_size for n in feats}
        _check_dims(self.metadata, dims, str(self.path))
        self._n = pf.metadata.num_rows
        self._features = _feature_cache(self.path, pf, feats, cache_dir)
        # Strings are small next to the features (~60 B/caption); numpy object arrays make the
        # per-batch gather a C-level take instead of a Python loop over Arrow scalars.
        strings = _read_table(self.path, list(STRING_COLUMNS))
        _check_captions(self.path, strings.column("caption"))
        self._strings = {n: np.asarray(strings.column(n).to_pylist(), dtype=object) for n in STRING_COLUMNS}

    def __len__(self) -> int:
        return self._n

    @property
    def feature_columns(self) -> tuple[str, ...]:
        return tuple(self._features)

    def dim(self, column: str) -> int:
        return int(self._features[column].shape[1])

    def image_ids(self) -> np.ndarray:
        """Every row's image id (object array, no feature read)."""
        return self._strings["image_id"]

    def column(self, name: str) -> np.ndarray:
        """The whole (n, d) feature column as a read-only memory-mapped array."""
        return self._features[name]

    def batch(self, indices: np.ndarray) -> dict:
        """Rows ``indices`` -> {"caption", "image_id": list[str], feature columns: float32 (n, d)}."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1:
            raise StoreError(f"{self.path}: batch indices must be 1-D, got shape {idx.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= self._n):
            raise StoreError(f"{self.path}: batch index out of range [0, {self._n})")
        out: dict = {n: self._strings[n][idx].tolist() for n in STRING_COLUMNS}
        for name, mat in self._features.items():
            # Fancy indexing a memmap gathers into a fresh, writable in-memory float32 array.
            out[name] = np.asarray(mat[idx])
        return out


def add_columns(
    path: str | os.PathLike,
    columns: Mapping[str, np.ndarray],
    extra_metadata: Mapping | None = None,
) -> Path:
    """Append precomputed feature columns (e.g. ``teacher_simcse``) to a store, atomically.

    ``extra_metadata`` is merged into ``StoreMetadata.extra`` (say which model made each column).
    Existing columns cannot be overwritten (re-convert instead) so a store never silently changes.
    """
    path = Path(path)
    _, meta = _open_schema(path)
    table = _read_table(path)
    for name, arr in columns.items():
        if name in table.column_names:
            raise StoreError(f"{path}: column {name!r} already exists; re-convert to replace it")
        if name == "clip_text":
            raise StoreError(f"{path}: add 'clip_text' at conversion time (it needs text_teacher metadata)")
        mat = _feature_matrix(path, name, arr)
        if mat.shape[0] != table.num_rows:
            raise StoreError(f"{path}: column {name!r} has {mat.shape[0]} rows, store has {table.num_rows}")
        table = table.append_column(name, _fixed_list(mat))
    extra = {**meta.extra, **dict(extra_metadata or {})}
    new_meta = StoreMetadata(**{**asdict(meta), "extra": extra, "page_checksums": True})
    new_meta.to_json()  # fail before writing if extra is not json-able
    table = table.replace_schema_metadata({META_KEY: new_meta.to_json().encode()})
    return _atomic_write_table(table, path)
