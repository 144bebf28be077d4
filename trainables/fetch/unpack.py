"""The unpacker: SentEval's archive, checked entry by entry, unpacked beside itself and moved
into place, each file's SHA-256 recorded."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from trainables.fetch.catalog import SENTEVAL_TASKS, Item
from trainables.fetch.errors import FetchError
from trainables.fetch.manifest import Manifest, file_hash
from trainables.runtime.modes import as_created, umask


def unpack(item: Item, root: Path, archive: Path, commit: str, man: Manifest,
            say: Callable[[str], None]) -> list[str]:
    """Unpack ``archive`` (checked by its published hash) into ``root/item.folder`` with the
    user's umask; record each file's SHA-256 so later runs check the unpacked files themselves.
    Unpacked beside the archive first, so a failure (a full disk) leaves the folder as it was."""
    dest = root / item.folder
    work = Path(tempfile.mkdtemp(prefix=".unpack-", dir=archive.parent))
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = Path(member.name)
                if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
                    raise FetchError(f"{item.name}: {archive.name} holds an unsafe entry "
                                     f"{member.name!r}; not unpacked")
            tar.extractall(work)  # noqa: S202 - every entry checked above
        base = next((d for d in [work, *sorted(work.rglob("*"))]
                     if d.is_dir() and (d / "STS").is_dir()), None)
        if base is None:
            raise FetchError(f"{item.name}: {archive.name} has no folder holding STS/")
        missing = [t for t in SENTEVAL_TASKS if not (base / t).is_dir()]
        if any(t.startswith(("STS", "SICK")) for t in missing):
            raise FetchError(f"{item.name}: {archive.name} lacks {', '.join(missing)}")
        if missing:  # the STS evaluation can run; the transfer tasks (TR) cannot
            say(f"  {item.name}: {archive.name} has no {', '.join(missing)}: the transfer tasks "
                "need them; SentEval's data/downstream/get_transfer_data.bash makes them, into "
                f"{dest}")
        mask = umask()
        for path in base.rglob("*"):  # the archive's modes would ignore the user's umask
            as_created(path, mask)
        dest.mkdir(parents=True, exist_ok=True)
        for entry in sorted(base.iterdir()):
            there = dest / entry.name
            if there.is_dir() and not there.is_symlink():
                shutil.rmtree(there)
            elif there.exists() or there.is_symlink():
                there.unlink()
            os.replace(entry, there)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    keys = []
    for path in sorted(p for p in dest.rglob("*") if p.is_file()):
        rel = path.relative_to(dest).as_posix()
        key = f"{item.name}:{rel}"
        man.files[key] = {"size": path.stat().st_size, "sha256": file_hash(path, "sha256"),
                          "source": f"{item.unpack} from {item.repo}@{commit}", "commit": commit}
        keys.append(key)
    return keys


