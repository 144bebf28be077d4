"""Issue 49: ``objective: kdmcse`` in a profile (meant ``objective.method: kdmcse``) was refused
naming an internal class ("expects Settings"); the line now says what to write."""

from __future__ import annotations

from orchestrator import ablate
from tests.orchestrator.refusing import refused


def test_objective_given_a_method_name_says_to_write_objective_method(tmp_path, capsys,
                                                                       monkeypatch):
    prof = tmp_path / "mine.yaml"
    prof.write_text("base: demo\nobjective: kdmcse\n")
    line = refused(tmp_path, ablate.main, ["--grid", "kdmcse_table3", "--profile", str(prof),
                                           "--dry-run"],
                   f"config file {prof}: setting 'objective' is the method's group of settings, "
                   "not one value (got 'kdmcse'); to choose the method write objective.method: "
                   "kdmcse", capsys, monkeypatch)
    assert "Settings" not in line


def test_another_group_given_a_value_names_its_settings(tmp_path, capsys, monkeypatch):
    prof = tmp_path / "mine.yaml"
    prof.write_text("base: demo\ndata: flickr.parquet\n")
    line = refused(tmp_path, ablate.main, ["--grid", "kdmcse_table3", "--profile", str(prof),
                                           "--dry-run"],
                   "setting 'data' is a group of settings, not one value (got 'flickr.parquet')",
                   capsys, monkeypatch)
    assert "pairs" in line and "DataConfig" not in line
