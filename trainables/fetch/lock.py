"""The lock two fetches into one ``$MMEMB_DATA`` share."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK = Path(".fetch") / "lock"


@contextlib.contextmanager
def hold(root: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Two fetches into one $MMEMB_DATA take turns. The lock file is removed while still held,
    and whoever gets a lock checks that it holds the file now at that name (one removed under it
    is tried again), so no lock is left behind and no two runs hold one at once. A ``.fetch``
    folder this run made and left empty goes too."""
    folder = root / LOCK.parent
    made = [p for p in (folder, *folder.parents) if not (p.exists() or p.is_symlink())]
    path = root / LOCK
    waited = False
    while True:
        folder.mkdir(parents=True, exist_ok=True)  # the run before may have removed it, empty
        fh = path.open("a")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not waited:
                say(f"another fetch is writing {root}; waiting for it to finish")
                waited = True
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            mine = os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            mine = False
        if mine:
            break
        fh.close()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        fh.close()
        for p in made:  # deepest first
            with contextlib.suppress(OSError):
                p.rmdir()  # only when empty: nothing was fetched there


