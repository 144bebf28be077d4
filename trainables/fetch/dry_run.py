"""``--dry-run``: every file with its source, size and check, what to bring by hand, and whether
the fetch would be refused; no network."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from trainables.fetch.catalog import Item, Manual
from trainables.fetch.errors import size_text
from trainables.fetch.manifest import Manifest, recorded
from trainables.fetch.places import cache_repo, endpoint, hub_cache
from trainables.fetch.refusals import existing, room_estimate, unwritable, writable_for


def is_made(m: Manual, root: Path) -> bool | None:
    """None: it makes nothing to look for; else whether what it makes is there (a column: in
    the store's schema)."""
    if m.made is None:
        return None
    if m.column is None or not (root / m.made).is_file():
        return (root / m.made).exists()
    import pyarrow.parquet as pq

    try:
        return m.column in pq.read_schema(root / m.made).names
    except Exception:  # noqa: BLE001 - an unreadable store has no column; its checks say why
        return False


def dry_run(items: tuple[Item, ...], manual: tuple[Manual, ...], root: Path, man: Manifest,
            say: Callable[[str], None]) -> int:
    """Every file with its source and size and how it is checked (before a first fetch: the kind
    of hash the hub publishes, read at download; after: the exact hash verified), what is to
    bring by hand, and whether the fetch would be refused; no network."""
    base = endpoint()
    pending = []
    for item in items:
        where = (f"Hugging Face cache ({cache_repo(item)})" if item.cache_name
                 else str(root / item.folder))
        if item.link:
            where += f" and {root / item.link} (a relative link to it)"
        state = recorded(item, root, man, verify=False)
        if state is not None:
            pending.append(item)
        say(f"{item.name}: {item.what} -> {where} [{'present' if state is None else 'to fetch'}]")
        rec = man.items.get(item.name)
        if rec and rec.get("repo") == item.repo:
            for key in rec["files"]:
                e = man.files.get(key, {})
                kind = "sha256" if "sha256" in e else "git"
                say(f"  {key.split(':', 1)[1]}  {size_text(e.get('size', 0))}  {kind} "
                    f"{e.get(kind, '?')}  {e.get('source', '?')}")
            continue
        from huggingface_hub import hf_hub_url

        names = item.files or ("config.json, tokenizer files, model.safetensors "
                               "(else pytorch_model.bin)",)
        for name in names:
            url = (hf_hub_url(item.repo, name, repo_type=item.repo_type, revision=item.revision,
                              endpoint=base) if item.files
                   else f"{base}/{item.repo} @ {item.revision}")
            how = ("sha256 as the hub publishes it for LFS files, read at download" if item.files
                   else "sha256 (weights) or git blob id (small files) as the hub publishes "
                        "them, read at download")
            say(f"  {name}  about {size_text(item.approx)}  {how}  {url}")
    say_manual(manual, root, say)
    todo = sum(i.approx * (2 if i.unpack else 1) for i in pending)
    say(f"to fetch: {len(pending)} of {len(items)} item(s), about {size_text(todo)} on disk (an "
        "archive counted with its unpacked copy); the exact sizes and hashes are read from the "
        "hub when the fetch starts, and this dry run lists them once fetched")
    for what, path in (("$MMEMB_DATA", root), ("the Hugging Face cache", hub_cache())):
        why = unwritable(path)
        free = shutil.disk_usage(existing(path)).free
        say(f"{what} {path}: {f'not writable ({why})' if why else 'writable'}, {size_text(free)} free")
    writable_for(pending, root, hub_cache())  # what the fetch would refuse, refused here too
    room_estimate(pending, root, hub_cache())
    return 0


def say_manual(manual: tuple[Manual, ...], root: Path, say: Callable[[str], None]) -> None:
    if not manual:
        return
    say("by hand (no scripted download allowed):")
    for m in manual:
        made = is_made(m, root)
        what = f"{m.made} column {m.column}" if m.column else m.made
        state = "" if made is None else (f"present: {what}" if made else f"missing: {what}")
        tags = "; ".join(filter(None, (state, m.role)))
        put = f"; put it at {m.put}" if m.put else ""
        then = f"; then: {m.command}" if m.command else ""
        say(f"  {m.name} [{tags}]: {m.what}: get {m.where}{put}{then}")


