"""What this process created in its caches, so that a refused command leaves nothing behind.

A table's preflight generates the demo world and derives the demo student (``.cache/mmemb``,
about 54 MB) before the checks that read them can refuse. A refused command must leave the work
folder as it found it, so each cache builder says what it made here (the highest folder it had
to create, never one that existed before), and the command line removes those on a refusal
(:func:`discard`) unless the run went ahead (:func:`keep`): then they are the run's caches.
Only what this process built itself is listed; a cache another process built, or one reused,
never is.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

_made: list[Path] = []


def _first_missing(path: Path) -> Path | None:
    """The highest folder of ``path`` (itself included) that does not exist yet, or None."""
    path = path.absolute()
    if path.exists():
        return None
    top = path
    while not top.parent.exists():
        top = top.parent
    return top


@contextlib.contextmanager
def building(path: str | Path) -> Iterator[list[bool]]:
    """Around a cache builder that makes ``path``: ``flag[0] = True`` inside, once this process
    has built it (not reused one), records the folder this made (``path`` or its highest new
    parent)."""
    top = _first_missing(Path(path))
    flag = [False]
    yield flag
    if top is not None and flag[0] and top not in _made:
        _made.append(top)


def keep() -> None:
    """The run goes ahead: what was built is its cache, kept."""
    _made.clear()


def discard() -> list[Path]:
    """Remove what this process built (newest first), after a refusal; returns it."""
    gone = []
    while _made:
        top = _made.pop()
        shutil.rmtree(top, ignore_errors=True)
        gone.append(top)
    return gone
