"""Upload results kept locally while MLflow was unreachable (see orchestrator.tracking.journal).

    python -m orchestrator.sync runs/mlflow-journal-PLAN.jsonl --tracking-uri URI

Upload to the store the table ran with: its parent run is there. Then the table's report is
rendered (``orchestrator.report``), which marks the table FINISHED once all its runs are. The
journal is kept, renamed to ``.uploaded``, as the record of what was uploaded. The store records
every entry it was given, so syncing a journal again (under either name) uploads nothing.
"""

from __future__ import annotations

import argparse
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
    from orchestrator.tracking.journal import entries, parents, retire
    from orchestrator.tracking.replay import Replayer, quiet_mlflow
    from orchestrator.tracking.uris import masked

    journal = Path(args.journal)
    if not journal.is_file() and journal.with_suffix(".uploaded").is_file():
        journal = journal.with_suffix(".uploaded")  # a sync before this one renamed it
    if not journal.is_file():
        raise ValueError(f"journal {journal} does not exist; pass the path the table printed")
    if args.tracking_uri:  # the hint of a table's start (drop --tracking-uri) is wrong here
        check_reachable(args.tracking_uri, hint="start it again (the journal waits for it) and "
                        "rerun this command with the same --tracking-uri")
    tracker = Tracker(args.tracking_uri, create=False)
    for parent in parents(journal, tracker):
        tracker.parent_run(parent)  # the right store: the journal's table is in it
    items = entries(journal, say=lambda _line: None)  # parents() has said what was cut
    replayer = Replayer(tracker)
    with quiet_mlflow():
        replayer.learn(items)
        legacy = [e for e in items if e["id"].startswith("legacy")]
        if journal.suffix == ".uploaded" and legacy and not replayer.applied(legacy[0]):
            raise ValueError(f"journal {journal} was uploaded before (its name ends in .uploaded) "
                             "by an mmemb that did not record uploads in the store, so uploading "
                             "it again would log every result twice; nothing was uploaded. To "
                             "upload it anyway, rename it to end in .jsonl")
    applied = sum(replayer.apply(e, str(journal)) for e in items)
    # a password in the URI stays off the console (the user's own URI, or PGPASSWORD, has it)
    uri = f" --tracking-uri {masked(args.tracking_uri)}" if args.tracking_uri else ""
    tables = parents(journal, tracker, quiet=True)
    if not applied:
        print(f"nothing to upload: the {len(items)} entries of {journal} are in {masked(tracker.uri)} "
              "already (uploaded before); the store is unchanged")
        for parent in tables:
            print(f"the table's report: python -m orchestrator.report --run {parent}{uri}")
        return 0
    done = journal if journal.suffix == ".uploaded" else retire(journal)
    there = f" ({len(items) - applied} were there already)" if applied < len(items) else ""
    print(f"uploaded {applied} entries to {masked(tracker.uri)}{there}; journal moved to {done}")
    rc = 0
    for parent in tables:
        if _is_table(tracker, parent):  # its report, which marks it FINISHED once complete
            from orchestrator import report

            real = ["--tracking-uri", args.tracking_uri] if args.tracking_uri else []
            rc = max(rc, report.main(["--run", parent, *real]))
        else:
            print(f"re-render the table: python -m orchestrator.report --run {parent}{uri}")
    return rc


def _is_table(tracker, parent: str) -> bool:
    """A parent whose report ``orchestrator.report`` renders (it holds its grid)."""
    try:
        return any(f.path == "grid.json" for f in tracker.client.list_artifacts(parent))
    except Exception:  # noqa: BLE001 - no artifacts to list: say the command instead
        return False


if __name__ == "__main__":
    from trainables.runtime.command_line import exit_now

    exit_now(main())  # no teardown of torch, Ray, MLflow: ~3 s
