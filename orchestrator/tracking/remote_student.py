"""A member's student saved by Ray into object storage (``--storage s3://...``) reaches MLflow as
it does from a folder: copied down beside the journal, logged as the run's model, and Ray's copy
removed once MLflow holds it (unless --keep-checkpoints). Ray reports a checkpoint's path on its
own filesystem, without scheme or endpoint (``bucket/runs/.../model``); the filesystem is the
one ``--storage`` names, endpoint options (``?endpoint_override=...``) and ``AWS_ENDPOINT_URL``
included, as Ray resolved it."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any


def storage_fs(storage: str) -> Any:
    """The pyarrow filesystem of a ``--storage`` URI (Ray resolves it the same way)."""
    import pyarrow.fs

    fs, _ = pyarrow.fs.FileSystem.from_uri(storage)
    return fs


def scheme_uri(storage: str, path: str) -> str:
    """``path`` on ``storage``'s filesystem as a URI a user can open (``s3://bucket/...``)."""
    scheme = storage.split("://", 1)[0]
    return f"{scheme}://{path.lstrip('/')}"


def fetch(storage: str, path: str, into: Path) -> Path:
    """Copy the folder ``path`` (on ``storage``'s filesystem) to the local folder ``into``,
    written under a temporary name and moved into place whole."""
    import pyarrow.fs

    partial = into.with_name(into.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    pyarrow.fs.copy_files(path, str(partial), source_filesystem=storage_fs(storage),
                          destination_filesystem=pyarrow.fs.LocalFileSystem())
    shutil.rmtree(into, ignore_errors=True)
    partial.rename(into)
    return into


def drop(storage: str, path: str) -> None:
    """Remove Ray's copy once MLflow holds the student (best effort: a copy left is no loss)."""
    with contextlib.suppress(Exception):
        storage_fs(storage).delete_dir(path)
