"""Is a model folder complete: its weights there, and where the fetch wrote it, every file at the
size the manifest recorded; if not, the instruction that remakes it.

A folder with ``config.json`` and a tokenizer but no weights loads its configuration (so a dry
run that only read the configuration passed it) and fails when the run loads the model; the
fetch now writes whole folders only (``install.model_folders``), but a folder copied by hand, or
written by an older fetch, can still be half there.
"""

from __future__ import annotations

from pathlib import Path

from trainables.fetch.catalog import MANUAL, PAPER, Item
from trainables.fetch.errors import Refused
from trainables.fetch.manifest import Manifest, recorded
from trainables.fetch.places import data_root

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")
"""one of these makes a folder loadable by ``from_pretrained`` (an index: sharded weights)"""


def remake(folder: Path, root: Path | None = None) -> str:
    """The instruction that makes ``folder`` again: the fetch of its item, the instruction for a
    folder brought by hand, or what a folder of one's own needs."""
    root = data_root() if root is None else root
    item = _fetched_item(folder, root)
    if item is not None:
        return f"run python -m trainables.fetch paper --only {item.name}"
    where = _resolved(folder)
    for m in MANUAL:
        if m.made and m.made.endswith("/config.json") and \
                _resolved(root / m.made).parent == where:
            return (f"bring it again as python -m trainables.fetch paper --only {m.name} says "
                    "(config.json, weights, tokenizer)")
    return "pass a complete model folder (config.json, weights, tokenizer files)"


def incomplete(folder: Path, root: Path | None = None) -> str | None:
    """None when ``folder`` holds config.json and weights (and, where the fetch wrote it, every
    file at its recorded size); else one line: what is missing and how to remake it."""
    root = data_root() if root is None else root
    fix = remake(folder, root)
    if not (folder / "config.json").is_file():
        return f"model folder {folder} has no config.json; {fix}"
    if not any((folder / w).is_file() for w in WEIGHT_FILES):
        return (f"model folder {folder} has no weights (model.safetensors or pytorch_model.bin): "
                f"a fetch or copy cut short; {fix}")
    item = _fetched_item(folder, root)
    if item is not None:
        try:
            man = Manifest.load(root)
        except Refused as err:
            return str(err)
        if item.name in man.items:
            why = recorded(item, root, man, verify=False)
            if why is not None:
                return f"model folder {folder} is not as the fetch verified it ({why}); {fix}"
    return None


def _fetched_item(folder: Path, root: Path) -> Item | None:
    where = _resolved(folder)
    for item in PAPER:
        for rel in filter(None, (item.folder if not item.files else None, item.link)):
            if _resolved(root / rel) == where:
                return item
    return None


def _resolved(path: Path) -> Path:
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError):  # a link loop: compared as written
        return path.expanduser().absolute()
