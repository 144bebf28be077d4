"""Files made the way the user's shell makes them: mode 0666 (folders 0777) less the umask.

``tempfile.mkstemp`` and ``mkdtemp`` make 0600 files and 0700 folders, private by design, and a
file unpacked from a tar keeps the archive's mode. A store or a data folder renamed into place
from them ignores the user's umask, so a data folder that a group shares (umask 002) is unreadable
or unwritable to the rest of the group.
"""

from __future__ import annotations

import os
from pathlib import Path


def umask() -> int:
    """The process's umask: from ``/proc/self/status`` where Linux says it (reading it there
    changes nothing, so threads are safe), else set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def as_created(path: str | os.PathLike, mask: int | None = None) -> None:
    """Give ``path`` the mode ``open()`` or ``mkdir()`` would have given it (0666 or 0777 less
    the umask, or less ``mask``)."""
    mask = umask() if mask is None else mask
    full = 0o777 if Path(path).is_dir() and not Path(path).is_symlink() else 0o666
    os.chmod(path, full & ~mask)
