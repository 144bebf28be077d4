"""Re-render a table's report (Markdown, CSV, PNG) from MLflow alone.

    python -m orchestrator.report --run PARENT_RUN_ID [--tracking-uri URI] [--out DIR]

The files go to ``reports/`` beside the store (or ``--out``) and onto the parent run. A table
whose runs all finished but whose parent was left FAILED or KILLED (its results were uploaded
later with ``orchestrator.sync``) is then marked FINISHED.
"""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator import cli


def parser() -> argparse.ArgumentParser:
    p = cli.parser("orchestrator.report", __doc__)
    p.add_argument("--run", required=True, help="MLflow run id of the table's parent run")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: ./mlflow.db)")
    p.add_argument("--out", help="also write report.md/csv/png here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return cli.guarded(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from orchestrator.results.report import build_report, report_dir
    from orchestrator.tracking.client import TAG, Tracker

    out = cli.check_out(args.out) if args.out else None
    tracker = Tracker(args.tracking_uri, create=False)
    parent = tracker.parent_run(args.run)
    try:
        spec = json.loads(tracker.load_artifact_text(args.run, "grid.json"))
    except Exception:
        raise ValueError(f"run {args.run} is not a table parent run (no grid.json artifact); "
                         "pass the parent run id printed by orchestrator.ablate") from None
    out = out or report_dir(tracker, spec["name"], args.run)
    extra = lead = ""
    if parent.data.tags.get(f"{TAG}kind") == "search":  # its section, its verdict first, again
        try:
            extra = tracker.load_artifact_text(args.run, "search.md")
        except Exception:  # noqa: BLE001 - a search stopped before its end has none
            extra = ""
        lead = next((ln for ln in extra.splitlines() if ln.startswith("**Against ")), "")
    analysis, md, upload_error = build_report(tracker, args.run, spec, out, extra_md=extra,
                                              lead_md=lead)
    print(md)
    print(f"\nreport files: {out}")
    if upload_error:
        print(f"error: could not upload the report to MLflow ({upload_error})", file=sys.stderr)
        return 1
    complete = all(s.complete for s in analysis.status.values())
    if complete and parent.info.status in ("FAILED", "KILLED") and \
            not any(c.info.status == "RUNNING" for c in tracker.children(args.run)):
        tracker.client.set_tag(args.run, f"{TAG}error", "")
        tracker.end(args.run, "FINISHED")
        print(f"every run of the table has finished: parent {args.run} is now FINISHED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
