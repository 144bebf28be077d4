"""Fetching one item: its files downloaded (or found verified), laid out as it is read (the
Hugging Face cache's layout, a folder under ``$MMEMB_DATA``, an unpacked archive) and recorded
in the manifest."""

from __future__ import annotations

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


def fetch_item(item: Item, root: Path, man: Manifest, say: Callable[[str], None],
               progress: bool = True, listed: tuple[str, list[Remote]] | None = None) -> str:
    """Fetch ``item`` (its ``listing``, or ``listed``) unless the manifest shows it complete;
    -> 'checked' or 'fetched'."""
    if recorded(item, root, man, verify=True) is None:
        return "checked"
    commit, remotes = listed or listing(item)
    fetched = 0
    keys = []
    for r, key, read_at, stored_at in targets(item, root, commit, remotes):
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
    if item.cache_name:
        ref = cache_repo(item) / "refs" / item.revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
        if item.link:
            _link_folder(root / item.link, cache_repo(item) / "snapshots" / commit)
    man.items[item.name] = {"repo": item.repo, "commit": commit, "files": keys}
    man.save()
    return "fetched" if fetched else "checked"


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


