"""How a fetch fails: refused before anything is written, one item failed, or the local disk
failed mid-run; each said in one line."""

from __future__ import annotations

import errno

FULL = (errno.ENOSPC, errno.EDQUOT)
LOCKED_OUT = (errno.EROFS, errno.EACCES, errno.EPERM)


class Refused(Exception):
    """The run cannot go as asked: one line naming what and the fix; nothing was written."""


class FetchError(Exception):
    """One item failed: one line naming it, the address where that applies, and what to do."""


class Stopped(Exception):
    """The local disk failed mid-run (full, read-only): one line; what was verified is kept."""


def size_text(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            digits = 0 if unit == "B" else 2 if unit == "GB" and n < 10 else 1
            return f"{n:.{digits}f} {unit}"
        n /= 1000
    return f"{n} B"


def disk_line(err: OSError, doing: str, kept: str = "what was verified is kept") -> str:
    where = err.filename or ""
    if err.errno in FULL:
        detail = ": ".join(filter(None, (str(where), err.strerror)))
        return (f"no space left on the disk {doing} ({detail}); {kept}; free some "
                "space, or point MMEMB_DATA / HF_HUB_CACHE at a larger disk, and run the same "
                "command again")
    if err.errno in LOCKED_OUT:
        return (f"cannot write {where} {doing} ({err.strerror}); {kept}; make it writable, or "
                "point MMEMB_DATA / HF_HUB_CACHE at a folder you can write, and run again")
    return f"{where}: {err.strerror or err} {doing}; {kept}"
