"""Re-render a table's report (Markdown, CSV, PNG) from MLflow alone.

    python -m orchestrator.report --run PARENT_RUN_ID [--tracking-uri URI] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from orchestrator.results.report import build_report, report_dir
from orchestrator.tracking.client import Tracker


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="MLflow run id of the table's parent run")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: ./mlflow.db)")
    p.add_argument("--out", help="also write report.md/csv/png here")
    args = p.parse_args(argv)
    try:
        tracker = Tracker(args.tracking_uri)
        try:
            spec = json.loads(tracker.load_artifact_text(args.run, "grid.json"))
        except Exception:
            raise ValueError(f"run {args.run} is not a table parent run (no grid.json artifact); "
                             "pass the parent run id printed by orchestrator.ablate") from None
    except (ValueError, ConnectionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else report_dir(tracker, spec["name"], args.run)
    _, md, upload_error = build_report(tracker, args.run, spec, out)
    print(md)
    print(f"\nreport files: {out}")
    if upload_error:
        print(f"error: could not upload the report to MLflow ({upload_error})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
