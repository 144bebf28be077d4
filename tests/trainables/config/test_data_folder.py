"""``$MMEMB_DATA`` a symbolic link that loops (``ln -s loop loop; MMEMB_DATA=loop``): the fetch,
its dry run and a paper dry run each end in one line naming the link, exit 2, nothing written;
before, each ended in a 25-line ``RuntimeError: Symlink loop`` traceback."""

from __future__ import annotations

import pytest

from orchestrator import ablate
from tests.orchestrator.refusing import refused
from trainables import fetch

LINE = "MMEMB_DATA=loop: a symbolic link that loops ("


@pytest.fixture
def loop(tmp_path, monkeypatch):
    (tmp_path / "loop").symlink_to("loop")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MMEMB_DATA", "loop")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no network
    return tmp_path


@pytest.mark.parametrize("argv", [["--dry-run"], ["--no-progress"], ["--data", "loop"]])
def test_the_fetch_and_its_dry_run_refuse_a_looping_data_folder_in_one_line(loop, argv, capsys):
    assert fetch.main(["paper", *argv]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"{loop / 'loop'} -> loop); point MMEMB_DATA (or --data) at a folder" in lines[0]
    assert lines[0].startswith("error: --data=loop: " if "--data" in argv else f"error: {LINE}")
    assert sorted(p.name for p in loop.iterdir()) == ["loop"]  # nothing written


def test_a_paper_dry_run_refuses_a_looping_data_folder_in_one_line(loop, capsys, monkeypatch):
    line = refused(loop, ablate.main, ["--grid", "table3", "--profile", "paper", "--dry-run"],
                   LINE, capsys, monkeypatch)
    assert "remove that link" in line, line
