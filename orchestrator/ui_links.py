"""Save a table's view in MLflow (again) and print its links in the MLflow UI.

    python -m orchestrator.ui_links --run PARENT_RUN_ID [--tracking-uri URI] [--base URL]

The views themselves: ``orchestrator.results.views``.
"""

from __future__ import annotations

import argparse
import sys

from orchestrator.results.views import DEFAULT_BASE, print_links, share


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m orchestrator.ui_links",
        description="Save a table's view in MLflow (again) and print its links in the MLflow UI.")
    p.add_argument("--run", required=True, help="the table's parent run id")
    p.add_argument("--tracking-uri", default=None, help="default: ./mlflow.db")
    p.add_argument("--base", default=DEFAULT_BASE, help="where `mlflow ui` listens")
    args = p.parse_args(argv)
    from orchestrator.tracking.client import Tracker

    print_links(share(Tracker(args.tracking_uri), args.run, args.base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
