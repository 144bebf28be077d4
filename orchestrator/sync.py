"""Upload results kept locally while MLflow was unreachable (see orchestrator.tracking.journal).

    python -m orchestrator.sync runs/mlflow-journal-PLAN.jsonl --tracking-uri URI

Upload to the store the table ran with: its parent run is there. The journal is kept, renamed to
``.uploaded``, as the record of what was uploaded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestrator import cli


def parser() -> argparse.ArgumentParser:
    p = cli.parser("orchestrator.sync", __doc__)
    p.add_argument("journal", help="the JSON-lines file the table printed")
    p.add_argument("--tracking-uri", help="MLflow tracking URI the table ran with "
                                          "(default: ./mlflow.db)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return cli.guarded(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from orchestrator.tracking.client import Tracker, check_reachable
    from orchestrator.tracking.journal import parents, replay

    journal = Path(args.journal)
    if not journal.is_file():
        raise ValueError(f"journal {journal} does not exist; pass the path the table printed")
    if args.tracking_uri:  # the hint of a table's start (drop --tracking-uri) is wrong here
        check_reachable(args.tracking_uri, hint="start it again (the journal waits for it) and "
                        "rerun this command with the same --tracking-uri")
    tracker = Tracker(args.tracking_uri, create=False)
    for parent in parents(journal, tracker):
        tracker.parent_run(parent)  # the right store: the journal's table is in it
    n = replay(journal, tracker)
    done = journal.with_suffix(".uploaded")
    journal.rename(done)  # kept, not deleted: the record of what was uploaded
    print(f"uploaded {n} entries to {tracker.uri}; journal moved to {done}")
    uri = f" --tracking-uri {args.tracking_uri}" if args.tracking_uri else ""
    for parent in parents(done, tracker, quiet=True):
        print(f"re-render the table: python -m orchestrator.report --run {parent}{uri}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
