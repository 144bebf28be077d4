"""``$MMEMB_DATA`` as a path, or one line saying why it cannot be one.

A symbolic link that loops (``ln -s loop loop; MMEMB_DATA=loop``) makes ``Path.resolve`` raise
``RuntimeError: Symlink loop`` (Python 3.11-3.12; ``OSError`` ELOOP after), which reached the
user as a 25-line traceback from the fetch, its dry run and every paper dry run. Kept apart from
``profiles`` (which imports torch) so the fetch reads it too and starts fast.
"""

from __future__ import annotations

import os
from pathlib import Path


def data_root(given: str | None = None, what: str = "MMEMB_DATA") -> Path:
    """The data folder: ``given`` (a ``--data`` option), else ``$MMEMB_DATA``, else ``./data``,
    resolved; a ``ValueError`` of one line when it is a link loop."""
    text = given or os.environ.get("MMEMB_DATA") or "data"
    return resolved(Path(text), f"{what}={text}" if given or os.environ.get("MMEMB_DATA")
                    else "the default data folder ./data")


def resolved(path: Path, what: str) -> Path:
    """``path`` made absolute with its links followed; a link loop on the way is one line naming
    the link (``what`` says where the path came from)."""
    try:
        return path.expanduser().resolve()
    except (RuntimeError, OSError):
        loop = _looping_link(path.expanduser().absolute())
        where = f"{loop} -> {os.readlink(loop)}" if loop else str(path)
        raise ValueError(f"{what}: a symbolic link that loops ({where}); point MMEMB_DATA (or "
                         "--data) at a folder, or remove that link") from None


def _looping_link(path: Path) -> Path | None:
    """The first link on ``path`` (from the root down) whose target cannot be resolved."""
    for part in (*reversed(path.parents), path):
        if part.is_symlink():
            try:
                part.resolve(strict=False)
            except (RuntimeError, OSError):
                return part
    return None
