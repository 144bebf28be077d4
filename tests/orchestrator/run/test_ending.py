from __future__ import annotations

import subprocess
import sys

from tests.test_imports import ROOT

PROBE = """
import sys, threading
from orchestrator.run.ending import report_imports_callback
cb = report_imports_callback()
assert "orchestrator.results.table_report" not in sys.modules
cb.on_trial_result(0, [], None, {"step": 1})
cb.on_trial_result(1, [], None, {"step": 2})  # once: no second thread
threads = [t for t in threading.enumerate() if t.name == "report-imports"]
assert len(threads) == 1, threads
threads[0].join(120)
print("scipy.stats" in sys.modules, "matplotlib.backends.backend_agg" in sys.modules,
      "orchestrator.results.table_report" in sys.modules)
"""


def test_the_first_report_imports_the_report_modules_in_a_thread():
    """The table's end then finds scipy and matplotlib imported (a fresh process: nothing of
    the report is imported before the first report)."""
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "True", "True"]
