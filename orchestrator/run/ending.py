"""A campaign's end: the report written beside the MLflow store and uploaded to the parent, the
parent ended, and where everything is printed.

A failed upload never hides the table: it is printed, kept on disk, and the parent says what
failed. A full disk or an MLflow that stopped answering mid-run ends the parent FAILED with the
command that continues (``--resume``) or uploads what was kept (``orchestrator.sync``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from orchestrator.run.failures import closing_advice


def write_report(session: Any, spec: Mapping[str, Any], extra_md: str = "",
                 lead_md: str = "") -> int:
    """Write the report (or say why not), end the parent, print where everything is.
    ``session``: an open ``orchestrator.run.campaign.Session`` (named, not imported: the session
    imports this module).
    ``lead_md``: the report's first line (a search's verdict)."""
    from orchestrator.results.table_report import build_report, report_dir
    from orchestrator.results.views import print_links, share
    from orchestrator.tracking.uris import masked, masked_text

    full = session.disk_full()
    if full is not None:
        session._end_all("FAILED", "the disk filled up; --resume continues the table")
        print(f"error: {full}", file=sys.stderr)
        return 3 if session.journal.kept else 1
    if session.journal.offline:
        session._end_all("FAILED", f"MLflow stopped answering; results kept in "
                                f"{session.journal.path}, uploaded by orchestrator.sync")
        print(f"\nMLflow stopped answering during the run; {session.journal.kept} results are "
              f"kept in {session.journal.path}.\nWhen it is back, upload them with:\n  "
              f"{masked_text(session.journal.upload_command())}\nthen render the report with:\n  python -m "
              f"orchestrator.report --run {session.parent} --tracking-uri {masked(session.tracker.uri)}",
              file=sys.stderr)
        return 3
    outdir = report_dir(session.tracker, session.campaign.name, session.parent)
    try:
        analysis, md, upload_error = build_report(session.tracker, session.parent, dict(spec),
                                                  outdir, extra_md=extra_md,
                                                  lead_md=lead_md)
    except Exception as e:  # the runs are in MLflow: never leave their parent RUNNING
        why = f"{type(e).__name__}: {e}"
        session.tracker.client.set_tag(session.parent, "mmemb.report_error", why[:500])
        session.tracker.end(session.parent, "FAILED")
        print(f"error: the runs finished but the report could not be built ({why}); the "
              f"parent run {session.parent} ends FAILED. Rebuild the report with: python -m "
              f"orchestrator.report --run {session.parent} --tracking-uri {masked(session.tracker.uri)}",
              file=sys.stderr)
        return 1
    complete = all(s.complete for s in analysis.status.values())
    print("\n" + md)
    print(f"\nreport: {outdir}/report.md")
    if session.journal.refused_files:  # the store answered but kept no files: not "offline"
        print(f"error: MLflow's artifact folder refused files ({session.journal.refused_files[0][:200]}); "
              f"the scores are in MLflow, and {session.journal.kept} file upload(s) (the students' "
              f"models) wait in {session.journal.path}: make the folder writable, then run "
              f"{masked_text(session.journal.upload_command())}", file=sys.stderr)
    if upload_error:
        session.tracker.client.set_tag(session.parent, "mmemb.report_error", upload_error[:500])
        session.tracker.end(session.parent, "FAILED")
        session._closed = True
        print(f"error: the report could not be stored in MLflow ({upload_error}); it is in "
              f"{outdir}. Upload it again with: python -m orchestrator.report --run "
              f"{session.parent} --tracking-uri {session.tracker.uri}", file=sys.stderr)
        return 1
    session.tracker.end(session.parent, "FINISHED" if complete and not session.journal.refused_files
                     else "FAILED")
    session._closed = True
    from orchestrator.results.views import DEFAULT_BASE
    from orchestrator.tracking.open_hint import open_hint, ui_base

    print(open_hint(session.tracker.uri))
    try:
        print_links(share(session.tracker, session.parent, ui_base(session.tracker.uri, DEFAULT_BASE)))
    except Exception as e:  # the links are a convenience; the table's result stands
        print(f"(could not save the table's MLflow view: {e})", file=sys.stderr)
    if session.journal.refused_files:
        return 1
    if not complete:
        print(closing_advice([why for m in session._mirrors for why in m.failures.values()]),
              file=sys.stderr)
        return 1
    return 0
