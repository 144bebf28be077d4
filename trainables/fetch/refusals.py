"""The refusals made before anything is written: the targets are folders, writable, with room
for what is still to download."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from trainables.fetch.catalog import Item
from trainables.fetch.errors import Refused, size_text
from trainables.fetch.manifest import Remote, targets


def existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (a link counts, even a broken one)."""
    while not (path.exists() or path.is_symlink()):
        path = path.parent
    return path


def not_a_folder(path: Path) -> str | None:
    """Why no folder can be at ``path``, or None."""
    probe = existing(path)
    if probe.is_dir():
        return None
    if probe.is_symlink() and not probe.exists():
        return f"{probe} is a broken link"
    return f"{probe} is a file" if probe == path else f"{probe} (above it) is a file"


def unwritable(path: Path) -> str | None:
    """Why nothing can be written at ``path`` (its nearest existing folder), or None. A file is
    really made and removed: ``os.access`` says yes to root on a read-only mount."""
    probe = existing(path)
    try:
        fd, name = tempfile.mkstemp(prefix=".mmemb-probe-", dir=probe)
    except OSError as err:
        return err.strerror or str(err)
    os.close(fd)
    os.unlink(name)
    return None


def targets_are_folders(root: Path, cache: Path) -> None:
    for what, path, fix in (("$MMEMB_DATA", root, "MMEMB_DATA (or --data)"),
                            ("the Hugging Face cache", cache, "HF_HUB_CACHE")):
        why = not_a_folder(path)
        if why:
            raise Refused(f"{what} {path} cannot be a folder: {why}; point {fix} at a folder "
                          "(it is made if missing)")


def writable_for(items: Iterable[Item], root: Path, cache: Path) -> None:
    """Refuse, before anything is written, a target that cannot be written while items that
    land there are still to fetch (the manifest lives in $MMEMB_DATA: every item writes there)."""
    items = list(items)
    if not items:
        return
    names = ", ".join(i.name for i in items)
    why = unwritable(root)
    if why:
        raise Refused(f"$MMEMB_DATA {root} is not a writable folder ({why}) and {names} "
                      f"{'is' if len(items) == 1 else 'are'} still to fetch; point MMEMB_DATA (or "
                      "--data) at a folder you can write (a complete, read-only data folder "
                      "needs no fetch)")
    cached = [i.name for i in items if i.cache_name]
    why = unwritable(cache) if cached else None
    if why:
        raise Refused(f"the Hugging Face cache {cache} is not a writable folder ({why}) and "
                      f"{', '.join(cached)} {'is' if len(cached) == 1 else 'are'} stored there; "
                      "point HF_HUB_CACHE at a folder you can write")


def room(plans: list[tuple[Item, tuple[str, list[Remote]]]], root: Path) -> None:
    """Refuse a disk without room for what is still to download, per disk: every file not yet on
    disk (less what a ``.part`` holds), and an archive's unpacked copy beside it."""
    from trainables.fetch.install import model_folders

    need: dict[int, list] = {}
    for item, (commit, remotes) in plans:
        final, staging = model_folders(item, root, commit)
        for r, _, _, stored_at in targets(item, root, commit, remotes):
            if final is not None and item.cache_name is None and not stored_at.is_file():
                stored_at = staging / stored_at.relative_to(final)  # a cut fetch's files wait there
            present = stored_at.is_file() and stored_at.stat().st_size == r.size
            part = stored_at.with_name(stored_at.name + ".part")
            have = part.stat().st_size if part.is_file() and not present else 0
            adds = [(stored_at, 0 if present else max(r.size - have, 0), r.path)]
            if item.unpack == r.path:
                adds.append((root / item.folder, r.size, f"its unpacked copy ({item.folder}/)"))
            for where, n, what in adds:
                if n:
                    folder = existing(where.parent)
                    row = need.setdefault(os.stat(folder).st_dev, [folder, 0, []])
                    row[1] += n
                    row[2].append(what)
    for folder, n, what in need.values():
        free = shutil.disk_usage(folder).free
        if free < n:
            raise Refused(f"{size_text(n)} needed on the disk of {folder} ({', '.join(what)}) but it "
                          f"has {size_text(free)} free; free some space, or point MMEMB_DATA / "
                          "HF_HUB_CACHE at a larger disk, and run again")


def room_estimate(pending: Iterable[Item], root: Path, cache: Path) -> None:
    """The dry run's ``room``, from the sizes the hub listed when the catalogue was written
    (it reads no network): refuse, as the fetch would, a disk with less free than the items still
    to fetch take there (an archive counted with its unpacked copy)."""
    need: dict[int, list] = {}
    for item in pending:
        folder = existing(cache if item.cache_name else root)
        row = need.setdefault(os.stat(folder).st_dev, [folder, 0, []])
        row[1] += item.approx * (2 if item.unpack else 1)
        row[2].append(item.name)
    for folder, n, names in need.values():
        free = shutil.disk_usage(folder).free
        if free < n:
            raise Refused(f"the fetch would be refused: about {size_text(n)} needed on the disk "
                          f"of {folder} ({', '.join(names)}) but it has {size_text(free)} free; "
                          "free some space, or point MMEMB_DATA / HF_HUB_CACHE at a larger disk, "
                          "and run again")
