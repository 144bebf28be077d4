"""A full disk, said in one line: which folder is full and what to do.

A table writes in three places (the ``--storage`` checkpoints, the MLflow store, ``reports/``),
often on one disk. When it fills, the failures come from everywhere at once (a worker's
checkpoint, Tune's experiment state, MLflow's sqlite) and each says it differently;
:func:`full_folders` names the folders whose disk has (almost) no room left, and
:func:`disk_full_line` turns that into the one line a user needs.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterable
from pathlib import Path

LOW_BYTES = 16 * 2**20
"""a disk with less room than this cannot take one more checkpoint of even the demo student"""
MARKERS = ("No space left on device", "database or disk is full", f"Errno {errno.ENOSPC}",
           "Disk quota exceeded", f"Errno {errno.EDQUOT}")
"""how a full disk (or quota) reads in an error message, from Python, sqlite and Ray"""


def says_disk_full(text: str) -> bool:
    return any(m in text for m in MARKERS)


def full_folders(folders: Iterable[str | Path], low: int = LOW_BYTES) -> list[Path]:
    """The folders (existing ancestors of) whose disk has less than ``low`` bytes free, one per
    disk."""
    out: list[Path] = []
    seen: set[int] = set()
    for f in folders:
        p = Path(f).absolute()
        while not p.exists() and p != p.parent:
            p = p.parent
        try:
            dev = p.stat().st_dev
            free = shutil.disk_usage(p).free
        except OSError:
            continue
        if free < low and dev not in seen:
            seen.add(dev)
            out.append(p)
    return out


def disk_full_line(full: list[Path], resume: str, upload: str = "") -> str:
    """The one line: the full folder(s), and the fix (``upload``: the sync of a journal)."""
    where = ", ".join(str(p) for p in full) or "a folder this table writes to"
    then = f"upload the results kept meanwhile with: {upload}; then " if upload else ""
    return (f"the disk holding {where} is full; unfinished runs were ended FAILED (none is left "
            f"RUNNING). Free space there (or point --storage and --tracking-uri at a larger "
            f"disk), {then}continue with: {resume}")
