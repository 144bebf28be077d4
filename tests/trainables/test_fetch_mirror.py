"""Fetching through a mirror is ``HF_ENDPOINT``: ``--help`` and the README say so, and a fetch
with it set takes every file from there (the stand-in hub is such a mirror in every fetch test).
``./data``, the default ``$MMEMB_DATA``, is never committed by accident."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from trainables import fetch

ROOT = Path(__file__).resolve().parents[2]


def test_help_says_hf_endpoint_is_the_way_to_fetch_through_a_mirror(capsys):
    with pytest.raises(SystemExit):
        fetch.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "HF_ENDPOINT, the hub to fetch from: point it at a mirror of huggingface.co" in text
    assert "MMEMB_DATA" in text and "HF_HUB_CACHE" in text


def test_the_readme_data_section_names_the_mirror_variable():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("### Bring the real data")
    section = readme[start:readme.index("\n## ", start)]
    assert re.search(r"mirror[^.]*`HF_ENDPOINT", " ".join(section.split())), section[:2000]


def test_the_default_data_folder_is_ignored_by_git():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", "data/wiki1m_for_simcse.txt"],
                             cwd=ROOT, timeout=60)
    assert ignored.returncode == 0, "./data (the default $MMEMB_DATA) is not in .gitignore"
    kept = subprocess.run(["git", "check-ignore", "-q", "trainables/data/store.py"], cwd=ROOT,
                          timeout=60)
    assert kept.returncode == 1  # the package folder of that name is not
