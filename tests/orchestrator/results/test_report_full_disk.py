"""Issue 49: a disk that fills while the report is written said only ``error: [Errno 28] No space
left on device``, naming neither the folder nor what to do, and left a half-written report."""

from __future__ import annotations

import errno

import pytest

from orchestrator.results import table_report
from orchestrator.results.table_report import build_report
from tests.orchestrator.results.report_store import ReportStore
from tests.orchestrator.results.test_report_subset import _scores, spec


def test_a_full_disk_names_the_folder_and_leaves_the_last_whole_report(tmp_path, monkeypatch):
    out = tmp_path / "reports" / "kdmcse_table3-p"
    out.mkdir(parents=True)
    for name in ("report.md", "report.csv"):
        (out / name).write_text(f"the last whole {name}\n")

    def disk_fills(analysis, path, **kwargs):  # the disk fills half-way through the plot
        path.write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(table_report.plots, "to_png", disk_fills)
    tr = ReportStore({"MCSE": _scores(0), "KDMCSE": _scores(1)})
    with pytest.raises(ValueError) as e:
        build_report(tr, "p", spec(), out)
    line = str(e.value)
    assert line.startswith(f"cannot write the report in {out}: No space left on device")
    assert "Free space there" in line and "--out DIR" in line and "\n" not in line
    assert sorted(p.name for p in out.iterdir()) == ["report.csv", "report.md"]  # no partial file
    assert (out / "report.md").read_text() == "the last whole report.md\n"
    assert tr.files == []  # nothing half uploaded either
