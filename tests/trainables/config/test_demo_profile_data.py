"""Issue 49: a profile on the demo (``base: demo``) that names its own corpus or store was run on
the demo corpus without a word, while ``--dry-run --explain`` listed the user's path."""

from __future__ import annotations

import pytest

from orchestrator import ablate
from tests.orchestrator.refusing import refused
from trainables.config.profiles import profile_overrides


@pytest.mark.parametrize("key", ["data.pairs", "data.text"])
def test_a_demo_profile_naming_its_own_data_is_refused(key, tmp_path, capsys, monkeypatch):
    prof = tmp_path / "mine.yaml"
    prof.write_text(f"base: demo\n{key}: /lab/flickr.parquet\n")
    line = refused(tmp_path, ablate.main, ["--grid", "kdmcse_table3", "--profile", str(prof),
                                           "--dry-run", "--explain"],
                   f"config file {prof}: {key}: /lab/flickr.parquet would not be read: base: "
                   "demo trains on the generated demo corpus", capsys, monkeypatch)
    assert "add data.demo: false to that file" in line and f"or remove {key}" in line


def test_a_demo_profile_that_turns_the_demo_off_reads_its_data(tmp_path):
    prof = tmp_path / "mine.yaml"
    prof.write_text("base: demo\ndata.demo: false\ndata.pairs: /lab/flickr.parquet\n")
    _, values = profile_overrides(str(prof))
    assert values["data.demo"] is False and values["data.pairs"] == "/lab/flickr.parquet"
    (tmp_path / "senteval.yaml").write_text("base: demo\ndata.senteval: /lab/senteval\n")
    assert profile_overrides(str(tmp_path / "senteval.yaml"))[1]["data.senteval"] == "/lab/senteval"
