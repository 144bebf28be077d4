"""Upload results kept locally while MLflow was unreachable (see orchestrator.tracking.journal).

    python -m orchestrator.sync runs/mlflow-journal-PLAN.jsonl --tracking-uri URI
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestrator.tracking.client import Tracker
from orchestrator.tracking.journal import replay


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.sync", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("journal", help="the JSON-lines file the table printed")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: ./mlflow.db)")
    args = p.parse_args(argv)
    journal = Path(args.journal)
    if not journal.is_file():
        print(f"error: journal {journal} does not exist; pass the path the table printed",
              file=sys.stderr)
        return 2
    try:
        tracker = Tracker(args.tracking_uri)
    except ConnectionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = replay(journal, tracker)
    done = journal.with_suffix(".uploaded")
    journal.rename(done)  # kept, not deleted: the record of what was uploaded
    print(f"uploaded {n} entries to {tracker.uri}; journal moved to {done}")
    print("re-render the table: python -m orchestrator.report --run PARENT_RUN_ID")
    return 0


if __name__ == "__main__":
    sys.exit(main())
