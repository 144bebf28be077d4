"""Open a table in the real MLflow UI, in headless Chromium, and check that it can be compared.

    python -m orchestrator.ui_check --tracking-uri sqlite:///$PWD/mlflow.db --out mlflow-ui.png

What it checks and how: ``orchestrator.results.browser_check``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from orchestrator import cli
from trainables.runtime.checks import POSITIVE
from trainables.runtime.command_line import option


def parser() -> argparse.ArgumentParser:
    p = cli.parser("orchestrator.ui_check", __doc__)
    p.add_argument("--tracking-uri", default=f"sqlite:///{Path.cwd() / 'mlflow.db'}")
    p.add_argument("--run", help="the table's parent run id (default: the latest table)")
    p.add_argument("--out", default="mlflow-ui.png", help="screenshot of the runs view")
    p.add_argument("--timeout", type=option(POSITIVE), default=60,
                   help="seconds each page may take to show what it should")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return cli.guarded(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from orchestrator.results.browser_check import check_ui
    from orchestrator.tracking.client import Tracker

    out = Path(args.out).resolve()
    cli.check_out(out.parent, "--out")
    tracker = Tracker(args.tracking_uri, create=False, write=False)  # the store exists; nothing created
    if args.run:
        tracker.parent_run(args.run)
    try:
        seen = check_ui(args.tracking_uri, out, parent_id=args.run, timeout=args.timeout)
    except (RuntimeError, TimeoutError) as e:
        raise ValueError(str(e)) from None
    print(json.dumps(seen, indent=1))
    for problem in seen["problems"]:
        print(f"missing: {problem}", file=sys.stderr)
    return 1 if seen["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
