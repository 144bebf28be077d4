"""An inter-process lock on a file, for caches that several workers may build at the same time.

Two DDP workers (or two trials on one node) that find the demo corpus or a store's decoded cache
missing must not both build it: the second would replace files the first is already reading.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if needed) for the ``with`` block."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes, even on a crash
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
