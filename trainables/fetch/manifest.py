"""What was verified (``$MMEMB_DATA/.fetch/manifest.json``) and where each file lives: per file
its size and hash, per item its commit and files; a file checked by size and hash."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from trainables.fetch.catalog import Item
from trainables.fetch.errors import Refused
from trainables.fetch.places import cache_repo

MANIFEST = Path(".fetch") / "manifest.json"
CHUNK = 1 << 20


@dataclass
class Manifest:
    """What was verified: per file its size and hash; per item its commit and files."""

    path: Path
    files: dict[str, dict] = field(default_factory=dict)
    items: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def load(cls, root: Path) -> Manifest:
        path = root / MANIFEST
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(path)
        except ValueError as err:
            raise Refused(f"{path} is not valid JSON ({err}); delete it and run again (every "
                          "file is then checked against the hub again)") from None
        except OSError as err:
            raise Refused(f"{path}: cannot read it ({err.strerror}); make it readable, or point "
                          "MMEMB_DATA (or --data) at another folder") from None
        return cls(path, raw.get("files", {}), raw.get("items", {}))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"files": self.files, "items": self.items}, indent=1,
                                  sort_keys=True) + "\n")
        os.replace(tmp, self.path)


# --- hashing and checking -------------------------------------------------------------------------
def file_hash(path: Path, kind: str) -> str:
    """``sha256`` of the bytes, or ``git`` (the blob id the hub lists for files outside LFS)."""
    h = hashlib.sha256() if kind == "sha256" else hashlib.sha1()
    if kind == "git":
        h.update(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def check(path: Path, entry: dict) -> str | None:
    """None when ``path`` has the entry's size and hash, else what is wrong."""
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != entry["size"]:
        return f"{size} bytes, expected {entry['size']}"
    kind = "sha256" if "sha256" in entry else "git"
    if file_hash(path, kind) != entry[kind]:
        return f"{kind} differs from {entry[kind][:12]}..."
    return None


@dataclass(frozen=True)
class Remote:
    path: str
    size: int
    kind: str  # "sha256" (LFS) or "git"
    digest: str
    url: str

    def entry(self, commit: str) -> dict:
        return {"size": self.size, self.kind: self.digest, "source": self.url, "commit": commit}


def targets(item: Item, root: Path, commit: str, remotes: Iterable[Remote]
             ) -> list[tuple[Remote, str, Path, Path]]:
    """(remote, manifest key, where the file is read, where its bytes are stored)."""
    out = []
    for r in remotes:
        if item.cache_name:
            repo = cache_repo(item)
            out.append((r, f"hf:{item.cache_name}/{r.path}",
                        repo / "snapshots" / commit / r.path, repo / "blobs" / r.digest))
        else:
            where = (root / MANIFEST.parent / r.path if item.unpack == r.path
                     else root / item.folder / r.path)
            out.append((r, f"{item.name}:{r.path}", where, where))
    return out


def recorded(item: Item, root: Path, man: Manifest, verify: bool) -> str | None:
    """The item's verified state from the manifest: None when it is complete on disk, else why
    not (``verify``: hash every file; else sizes only, for the dry run and the plan)."""
    rec = man.items.get(item.name)
    if not rec or rec.get("repo") != item.repo:
        return "not fetched"
    for key in rec["files"]:
        entry = man.files.get(key)
        if entry is None:
            return f"{key} is not in the manifest"
        path = path_of(item, root, key, rec["commit"])
        if not path.is_file():
            return f"{path} is missing"
        problem = check(path, entry) if verify else (
            None if path.stat().st_size == entry["size"] else "size differs")
        if problem:
            return f"{path}: {problem}"
    if item.link and not (root / item.link / "config.json").is_file():
        return f"{root / item.link} is missing"
    return None


def path_of(item: Item, root: Path, key: str, commit: str) -> Path:
    rel = key.split(":", 1)[1]
    if item.cache_name:
        return cache_repo(item) / "snapshots" / commit / rel[len(item.cache_name) + 1:]
    return root / item.folder / rel

