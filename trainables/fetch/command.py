"""The command line: ``python -m trainables.fetch paper [--only ...] [--dry-run]``: each item
on its own, a summary, and the exit status (0, 1 when an item failed, 2 for a refusal)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from trainables.fetch.catalog import PAPER, TARGETS, Item, Manual
from trainables.fetch.dry_run import dry_run, is_made, say_manual
from trainables.fetch.errors import FetchError, Refused, Stopped, disk_line
from trainables.fetch.hub import listing
from trainables.fetch.install import fetch_item
from trainables.fetch.lock import hold
from trainables.fetch.manifest import Manifest, recorded
from trainables.fetch.places import data_root, endpoint, hub_cache
from trainables.fetch.refusals import (
    room,
    targets_are_folders,
    unwritable,
    writable_for,
)


def _revision(text: str) -> tuple[str, str]:
    name, sep, rev = text.partition("=")
    names = [i.name for i in PAPER]
    if not sep or not rev.strip() or name not in names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected ITEM=REVISION with ITEM one of {', '.join(names)} "
            "(e.g. wiki1m=main)")
    return name, rev.strip()


def parser() -> argparse.ArgumentParser:
    from trainables.runtime.command_line import Parser

    p = Parser(
        prog="python -m trainables.fetch",
        description="Download what a profile reads into $MMEMB_DATA and the Hugging Face cache, "
                    "each file checked by size and hash; resumable; a second run checks and "
                    "downloads nothing; says how to bring what no script may download.",
        epilog="environment: MMEMB_DATA, the data folder (default ./data); HF_HUB_CACHE, the "
               "Hugging Face cache the students and CLIP go to; HF_ENDPOINT, the hub to fetch "
               "from: point it at a mirror of huggingface.co to fetch through the mirror "
               "(HF_ENDPOINT=https://mirror.example python -m trainables.fetch paper), every "
               "file still checked against the hash the mirror lists; HF_TOKEN, for a gated "
               "repository.")
    p.add_argument("target", choices=sorted(TARGETS), help="the profile whose data to fetch")
    p.add_argument("--data", default=None,
                   help="the data folder (default: $MMEMB_DATA, else ./data)")
    names = [i.name for items, manual in TARGETS.values() for i in (*items, *manual)]
    p.add_argument("--only", nargs="+", metavar="ITEM", choices=sorted(set(names)),
                   help=f"fetch only these, or show only these instructions ({', '.join(names)})")
    p.add_argument("--revision", action="append", type=_revision, default=[],
                   metavar="ITEM=REVISION",
                   help="fetch ITEM at another revision (a branch, tag or commit) than the pinned "
                        "one, e.g. wiki1m=main when the pinned commit is gone upstream")
    p.add_argument("--dry-run", action="store_true",
                   help="list every file with its size, checksum and source, and what would be "
                        "refused; no network")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    items, manual = TARGETS[args.target]
    revisions = dict(args.revision)
    items = tuple(dataclasses.replace(i, revision=revisions[i.name], pinned=None)
                  if i.name in revisions else i for i in items)
    skipped: tuple[str, ...] = ()
    if args.only:  # names checked by the parser (one error: line)
        skipped = tuple(i.name for i in items if i.name not in args.only)
        items = tuple(i for i in items if i.name in args.only)
        manual = tuple(m for m in manual if m.name in args.only)
    say = print
    try:
        try:
            root, cache = data_root(args.data), hub_cache()
        except ValueError as err:  # $MMEMB_DATA a link that loops
            raise Refused(str(err)) from None
        targets_are_folders(root, cache)
        if args.dry_run:
            say(f"fetch {args.target} --dry-run: $MMEMB_DATA={root}, Hugging Face cache "
                f"{cache}, source {endpoint()}")
            return dry_run(items, manual, root, Manifest.load(root), say)
        return _fetch(args, items, manual, skipped, root, cache, say)
    except (Refused, Stopped) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fetch: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


def _fetch(args: argparse.Namespace, items: tuple[Item, ...], manual: tuple[Manual, ...],
           skipped: tuple[str, ...], root: Path, cache: Path, say: Callable[[str], None]) -> int:
    from huggingface_hub import constants

    man = Manifest.load(root)
    pending = [i for i in items if recorded(i, root, man, verify=False) is not None]
    writable_for(pending, root, cache)
    if pending and constants.is_offline_mode():
        raise Refused("HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set and the fetch needs the "
                      "hub for " + ", ".join(i.name for i in pending) + ": run HF_HUB_OFFLINE=0 "
                      "TRANSFORMERS_OFFLINE=0 python -m trainables.fetch paper")
    say(f"fetch {args.target}: into $MMEMB_DATA={root} and the Hugging Face cache {cache}")
    done: dict[str, list[str]] = {"fetched": [], "checked": [], "failed": []}
    failures: list[str] = []

    def failed(item: Item, why: str) -> None:
        done["failed"].append(item.name)
        failures.append(why)
        say(f"  {item.name}: failed ({item.what})")
        print(f"failed: {why}", file=sys.stderr)

    plans = []
    for item in items:  # complete items are checked; the rest listed (no writes yet)
        if item not in pending and recorded(item, root, man, verify=True) is None:
            done["checked"].append(item.name)
            say(f"  {item.name}: checked ({item.what})")
            continue
        why = unwritable(root) or (unwritable(cache) if item.cache_name else None)
        if why:  # complete by size but not by hash, and nowhere to write it again
            failed(item, f"{item.name}: {recorded(item, root, man, verify=True)}, and it cannot "
                         f"be fetched again there ({why}); ask whoever can write the folder to "
                         "run the fetch")
            continue
        try:
            plans.append((item, listing(item)))
        except FetchError as err:
            failed(item, str(err))
    if plans:
        room(plans, root)  # a refusal: nothing written yet
        try:
            with hold(root, say):
                man = Manifest.load(root)  # another fetch may have added to it while we waited
                for item, listed in plans:
                    try:
                        state = fetch_item(item, root, man, say, not args.no_progress, listed)
                    except FetchError as err:
                        failed(item, str(err))
                        continue
                    except OSError as err:
                        done["failed"].append(item.name)
                        raise Stopped(f"{item.name}: "
                                      f"{disk_line(err, f'while fetching {item.name}')}") from None
                    except Stopped:
                        done["failed"].append(item.name)
                        raise
                    done[state].append(item.name)
                    say(f"  {item.name}: {state} ({item.what})")
        except Stopped:
            said = {n for names in done.values() for n in names}
            untried = [item.name for item, _ in plans if item.name not in said]
            _summary(done, skipped, manual, root, say, untried)
            raise
    say_manual(manual, root, say)
    _summary(done, skipped, manual, root, say)
    if failures:  # each said on stderr, with what to do
        return 1
    say(f"next: export MMEMB_DATA={root}, then python -m orchestrator.ablate --grid table3 "
        "--profile paper --dry-run checks what a table reads")
    return 0


def _summary(done: dict[str, list[str]], skipped: tuple[str, ...], manual: tuple[Manual, ...],
             root: Path, say: Callable[[str], None], untried: Iterable[str] = ()) -> None:
    """One line: fetched, checked, skipped, failed, and (a run stopped by the disk) the items
    never tried, which the next run fetches."""
    def part(word: str, names: Iterable[str], why: str = "") -> str:
        names = list(names)
        return f"{word} {len(names)}" + (f" ({', '.join(names)}{why})" if names else "")

    line = ", ".join((part("fetched", done["fetched"]), part("checked", done["checked"]),
                      part("skipped", skipped, ": not in --only"), part("failed", done["failed"]),
                      *([part("not tried", untried, ": the run stopped before them; the same "
                              "command fetches them")] if untried else [])))
    stores = [m for m in manual if m.made and m.role.startswith("required")]
    missing = [f"{m.made} column {m.column}" if m.column else m.made
               for m in stores if not is_made(m, root)]
    hand = (f"; by hand: {len(stores) - len(missing)} of {len(stores)} required present"
            + (f" (missing: {', '.join(missing)}; see the instructions above)" if missing else "")
            if stores else "")
    say(f"summary: {line}{hand}")


if __name__ == "__main__":
    sys.exit(main())
