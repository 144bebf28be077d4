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
    p.add_argument("--out", help="also write report.md/csv/png here (a folder that holds "
                                 "report files of its own is refused)")
    p.add_argument("--close", action="store_true",
                   help="end a parent left RUNNING by a driver that is gone (and its RUNNING "
                        "runs) KILLED, then report; --resume of the table still continues it")
    return p


OUR_FILES = ("report.md", "report.csv", "report.png")
MARK = ".mmemb-report"
"""left in an --out folder by this command: its report files may be written over next time"""


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return cli.guarded(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from orchestrator.results.table_report import build_report, report_dir
    from orchestrator.tracking.client import TAG, Tracker

    out = cli.check_out(args.out) if args.out else None
    if out is not None and not (out / MARK).exists():
        theirs = [f for f in OUR_FILES if (out / f).exists()]
        if theirs:
            raise ValueError(f"--out {out} already holds {', '.join(theirs)}, which "
                             "orchestrator.report did not write there; pick another folder (or "
                             "move those files away)")
    tracker = Tracker(args.tracking_uri, create=False)
    parent = tracker.parent_run(args.run)
    left_running = False
    if parent.info.status == "RUNNING":
        from orchestrator.run.driver import describe, running_driver

        holder = running_driver(tracker, parent)
        if holder is not None:
            raise ValueError(f"the table of parent {args.run} is still training ("
                             f"{describe(holder)}); nothing was written: its report is written "
                             "when it ends, or run this again once it has ended")
        left_running = True
        if args.close:
            reason = "closed by orchestrator.report --close: its driver was gone"
            for c in tracker.children(args.run):
                if c.info.status == "RUNNING":
                    tracker.client.set_tag(c.info.run_id, f"{TAG}error", reason)
                    tracker.end(c.info.run_id, "KILLED")
            tracker.client.set_tag(args.run, f"{TAG}error", reason)
            tracker.end(args.run, "KILLED")
            parent = tracker.client.get_run(args.run)
            print(f"parent {args.run} and its unfinished runs were RUNNING with no driver: now "
                  "KILLED (--resume of the table continues them)")
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
    if args.out:
        (out / MARK).write_text(args.run)
    print(md)
    print(f"\nreport files: {out}")
    if left_running and not args.close:
        print(f"note: parent {args.run} was left RUNNING by a driver that is gone (killed, or "
              "its machine went down), so its unfinished runs read as failed above; continue "
              "the table with its command and --resume, or close it with: python -m "
              f"orchestrator.report --run {args.run} --close", file=sys.stderr)
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
    from trainables.runtime.command_line import exit_now

    exit_now(main())  # no teardown of torch, Ray, MLflow: ~3 s
