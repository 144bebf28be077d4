"""Open a table in the real MLflow UI, in headless Chromium, and check that it can be compared.

    python -m orchestrator.ui_check --tracking-uri sqlite:///$PWD/mlflow.db --out mlflow-ui.png

What it checks and how: ``orchestrator.results.browser_check``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from orchestrator.results.browser_check import check_ui


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.ui_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tracking-uri", default=f"sqlite:///{Path.cwd() / 'mlflow.db'}")
    p.add_argument("--run", help="the table's parent run id (default: the latest table)")
    p.add_argument("--out", default="mlflow-ui.png", help="screenshot of the runs view")
    p.add_argument("--timeout", type=float, default=60,
                   help="seconds each page may take to show what it should")
    args = p.parse_args(argv)
    try:
        seen = check_ui(args.tracking_uri, Path(args.out).resolve(), parent_id=args.run,
                        timeout=args.timeout)
    except (FileNotFoundError, ValueError, RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(seen, indent=1))
    for problem in seen["problems"]:
        print(f"missing: {problem}", file=sys.stderr)
    return 1 if seen["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
