"""Save a table's view in MLflow (again) and print its links in the MLflow UI.

    python -m orchestrator.ui_links --run PARENT_RUN_ID [--tracking-uri URI] [--base URL]

The views themselves: ``orchestrator.results.views``.
"""

from __future__ import annotations

import argparse
import sys

from orchestrator import cli


def parser() -> argparse.ArgumentParser:
    p = cli.parser("orchestrator.ui_links", __doc__)
    p.add_argument("--run", required=True, help="the table's parent run id")
    p.add_argument("--tracking-uri", default=None, help="default: ./mlflow.db")
    p.add_argument("--base", default=None,
                   help="where the MLflow UI is: for an http(s):// tracking server, the server "
                        "itself; else where `mlflow ui` listens (http://127.0.0.1:5000)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return cli.guarded(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from orchestrator.results.views import print_links, share
    from orchestrator.tracking.client import Tracker
    from orchestrator.tracking.open_hint import ui_base

    tracker = Tracker(args.tracking_uri, create=False)
    tracker.parent_run(args.run)
    # A tracking server is its own UI: links to a local `mlflow ui` would show another store.
    base = args.base or ui_base(tracker.uri, "http://127.0.0.1:5000")
    print_links(share(tracker, args.run, base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
