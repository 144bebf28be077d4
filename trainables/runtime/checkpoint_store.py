"""An array's checkpoints in ``--storage``, written and found again without Ray Train.

An array of one worker trains inside its Tune trial (``trainables.runtime.in_trial``), so
nothing of Ray Train keeps its checkpoints. They go where Train put them, ``<storage>/<run
name>/checkpoint_<UTC time>``, on any filesystem pyarrow opens (a folder, ``s3://`` with its
endpoint options): a ``--resume`` after a killed driver, and Tune's restart of a failed trial,
find the newest one there by the run's name, which is stable per member set and parent.

Whole or absent: a checkpoint counts once its ``.complete`` marker is written, after every
other file, so a copy cut short (a node lost mid-upload) is never loaded; an older checkpoint
is deleted only after a newer one is complete.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

PREFIX = "checkpoint_"
MARKER = ".complete"


class CheckpointStore:
    """The checkpoints of one run (``name``) under ``storage``; paths are on its filesystem,
    as Ray reports them (``/abs/folder/...`` or ``bucket/prefix/...``)."""

    def __init__(self, storage: str, name: str, keep_all: bool = False) -> None:
        import pyarrow.fs

        if "://" in storage:
            self.fs, base = pyarrow.fs.FileSystem.from_uri(storage)
        else:
            self.fs, base = pyarrow.fs.LocalFileSystem(), str(Path(storage).resolve())
        self.root = f"{base.rstrip('/')}/{name}"
        self.keep_all = keep_all
        self.local = isinstance(self.fs, pyarrow.fs.LocalFileSystem)

    def _complete(self) -> list[str]:
        """Paths of the complete checkpoints, oldest first."""
        import pyarrow.fs

        try:
            found = self.fs.get_file_info(pyarrow.fs.FileSelector(self.root, allow_not_found=True))
        except FileNotFoundError:
            return []
        dirs = sorted(f.path for f in found if f.type == pyarrow.fs.FileType.Directory
                      and f.base_name.startswith(PREFIX))
        marks = self.fs.get_file_info([f"{d}/{MARKER}" for d in dirs])
        return [d for d, m in zip(dirs, marks, strict=True) if m.type == pyarrow.fs.FileType.File]

    def latest(self) -> str | None:
        """The newest complete checkpoint, or None."""
        done = self._complete()
        return done[-1] if done else None

    def save(self, folder: Path) -> str:
        """Put the local ``folder`` in storage as the newest checkpoint and return its path; the
        folder is consumed (moved when storage is on this filesystem, else copied, then removed).
        Unless ``keep_all``, the older checkpoints are deleted once this one is complete."""
        import pyarrow.fs

        older = self._complete()
        stamp = datetime.now(UTC).strftime("%Y-%m-%d_%H-%M-%S.%f")
        path = f"{self.root}/{PREFIX}{stamp}"
        if older and path <= older[-1]:  # a clock that went back must not hide this one
            path = older[-1] + "_1"
        if self.local:
            Path(self.root).mkdir(parents=True, exist_ok=True)
            shutil.move(str(folder), path)  # a rename on one filesystem: no copy of the weights
        else:
            pyarrow.fs.copy_files(str(folder), path, source_filesystem=pyarrow.fs.LocalFileSystem(),
                                  destination_filesystem=self.fs)
            shutil.rmtree(folder, ignore_errors=True)
        with self.fs.open_output_stream(f"{path}/{MARKER}") as f:
            f.write(b"")
        if not self.keep_all:
            for old in older:
                with contextlib.suppress(Exception):  # gone already: nothing to free
                    self.fs.delete_dir(old)
        return path

    @contextlib.contextmanager
    def opened(self, path: str | None) -> Iterator[Path | None]:
        """``path`` as a local folder while the block runs (downloaded from object storage into
        a temporary folder, removed after); None stays None."""
        if path is None or self.local:
            yield None if path is None else Path(path)
            return
        import pyarrow.fs

        tmp = Path(tempfile.mkdtemp(prefix="mmemb-restore-"))
        try:
            pyarrow.fs.copy_files(path, str(tmp / "ckpt"), source_filesystem=self.fs,
                                  destination_filesystem=pyarrow.fs.LocalFileSystem())
            yield tmp / "ckpt"
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
