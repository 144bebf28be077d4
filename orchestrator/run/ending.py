"""A campaign's end: the report written beside the MLflow store and uploaded to the parent, the
parent ended, and where everything is printed.

A failed upload never hides the table: it is printed, kept on disk, and the parent says what
failed. A full disk ends the parent FAILED with the command that continues (``--resume``). An
MLflow that failed mid-run (locked, or not answering) gets what the journal kept once more,
with back-off; only if it still fails does the parent end FAILED, with the one command that
uploads what was kept and renders the report (``orchestrator.sync``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from orchestrator.run.failures import closing_advice

REPORT_MODULES = ("orchestrator.results.table_report", "matplotlib.figure",
                  "matplotlib.backends.backend_agg")
"""what rendering a table's report imports (the figure's modules only when it draws)"""


def report_imports_callback(modules: tuple[str, ...] = REPORT_MODULES):
    """A Tune callback that imports the report's modules (scipy's tests, matplotlib: ~3 CPU
    seconds) in a thread at the first report, once the arrays train and the driver only waits
    on them: the table's end then does not wait for them. Before, the arrays' own start would
    have shared the CPU with it."""
    import importlib
    import threading

    from ray.tune import Callback

    class ReportImports(Callback):
        started = False

        def on_trial_result(self, iteration, trials, trial, result, **info):
            if not self.started:
                self.started = True
                threading.Thread(target=lambda: [importlib.import_module(m) for m in modules],
                                 name="report-imports", daemon=True).start()

    return ReportImports()


def _end_wait() -> float:
    """How long the end waits for a store that failed mid-table: as long as any command waits
    for a locked store (``$MMEMB_STORE_BUSY_S``)."""
    from orchestrator.tracking.store_lock import store_busy_s

    return store_busy_s()


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
    j = session.journal
    late = len(j.held)
    if j.kept and not j.finish(_end_wait()):  # the store failed mid-table: once more, with back-off
        if j.offline:
            j.retry_at = float("inf")  # said below; the ends that follow wait in the journal too
            session._end_all("FAILED", f"{j.cause}; results kept in {j.path}, uploaded by "
                                       "orchestrator.sync")
            print(f"\nerror: {j.cause}, still at the table's end; the {j.kept} results written "
                  f"meanwhile are kept in {j.path}. Once the store answers, one command uploads "
                  f"them and renders the report:\n  {masked_text(j.upload_command())}", file=sys.stderr)
            return 3
    elif late:
        print(f"note: {j.cause} for part of the table; the {late} result(s) kept meanwhile are "
              f"uploaded now (the record: {j.retired})", file=sys.stderr)
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
              f"{session.parent} --tracking-uri {masked(session.tracker.uri)}", file=sys.stderr)
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
