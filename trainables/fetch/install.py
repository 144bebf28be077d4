"""Fetching one item: its files downloaded (or found verified), laid out as it is read (the
Hugging Face cache's layout, a folder under ``$MMEMB_DATA``, an unpacked archive) and recorded
in the manifest."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from trainables.fetch.catalog import Item
from trainables.fetch.errors import Stopped, disk_line
from trainables.fetch.hub import download, gone, listing
from trainables.fetch.manifest import Manifest, Remote, check, recorded, targets
from trainables.fetch.places import cache_repo
from trainables.fetch.unpack import unpack

STAGING = ".fetching"
"""the suffix (a teacher) or folder (a cached repository) a model folder is written under"""


def fetch_item(item: Item, root: Path, man: Manifest, say: Callable[[str], None],
               progress: bool = True, listed: tuple[str, list[Remote]] | None = None) -> str:
    """Fetch ``item`` (its ``listing``, or ``listed``) unless the manifest shows it complete;
    -> 'checked' or 'fetched'. A model folder is written under a staging name and moved into
    place once every file is verified, so a cut fetch leaves no folder under its final name."""
    if recorded(item, root, man, verify=True) is None:
        return "checked"
    commit, remotes = listed or listing(item)
    final, staging = model_folders(item, root, commit)
    if final is not None:
        _stage(final, staging)
    fetched = 0
    keys = []
    for r, key, read_at, stored_at in targets(item, root, commit, remotes):
        if final is not None:  # the staging folder stands in for the final one until the end
            read_at = staging / read_at.relative_to(final)
            stored_at = read_at if item.cache_name is None else stored_at
        entry = r.entry(commit)
        if check(stored_at, entry) is not None:
            download(r, stored_at, f"{item.name} {r.path}", progress, gone(item), say)
            fetched += 1
        if item.cache_name:
            _link_snapshot(read_at, stored_at)
        if item.unpack == r.path:
            try:
                keys += unpack(item, root, stored_at, commit, man, say)
            except OSError as err:
                raise Stopped(f"{item.name}: " + disk_line(
                    err, f"while unpacking {r.path} into {root / item.folder}",
                                         f"the verified {r.path} is kept in {stored_at.parent} "
                                         "and is unpacked without downloading it again")) from None
            stored_at.unlink()
            continue
        man.files[key] = entry
        keys.append(key)
    if final is not None:  # every file verified: the folder takes its name
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, final)
        if item.cache_name:
            with contextlib.suppress(OSError):
                staging.parent.rmdir()  # only when empty
    if item.cache_name:
        ref = cache_repo(item) / "refs" / item.revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
        if item.link:
            _link_folder(root / item.link, cache_repo(item) / "snapshots" / commit)
    man.items[item.name] = {"repo": item.repo, "commit": commit, "files": keys}
    man.save()
    return "fetched" if fetched else "checked"


def model_folders(item: Item, root: Path, commit: str) -> tuple[Path | None, Path | None]:
    """A model item's folder and the staging folder it is written in: ``teachers/.<name>.fetching``
    beside a teacher, ``.fetching/<commit>`` in a cached repository (as deep as
    ``snapshots/<commit>``, so the relative links to ``blobs/`` hold once it is moved); (None,
    None) for the data items (their files are each complete or absent already)."""
    if item.files:
        return None, None
    if item.cache_name:
        repo = cache_repo(item)
        return repo / "snapshots" / commit, repo / STAGING / commit
    final = root / item.folder
    return final, final.with_name(f".{final.name}{STAGING}")


def _stage(final: Path, staging: Path) -> None:
    """Take ``final`` out of its name while it is incomplete: its files (verified again before
    use) join the staging folder, where a cut fetch's files already wait."""
    if not (final.exists() or final.is_symlink()):
        return
    if final.is_symlink() or not final.is_dir():
        final.unlink()
        return
    if not staging.exists():
        staging.parent.mkdir(parents=True, exist_ok=True)
        os.replace(final, staging)
        return
    for entry in final.iterdir():
        if not (staging / entry.name).exists():
            os.replace(entry, staging / entry.name)
    shutil.rmtree(final)


def _link_folder(link: Path, target: Path) -> None:
    """``link`` -> ``target`` as a relative link, so $MMEMB_DATA and a cache kept beside it can
    move together (as the cache's own snapshot links do)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink() if link.is_symlink() else shutil.rmtree(link)
    link.symlink_to(os.path.relpath(target.resolve(), link.parent.resolve()),
                    target_is_directory=True)


def _link_snapshot(snapshot: Path, blob: Path) -> None:
    """The cache's layout: ``snapshots/<commit>/<file>`` is a relative link to ``blobs/<etag>``."""
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    target = Path(os.path.relpath(blob, snapshot.parent))
    if snapshot.is_symlink() and Path(os.readlink(snapshot)) == target:
        return
    if snapshot.is_symlink() or snapshot.exists():
        snapshot.unlink()
    snapshot.symlink_to(target)


