"""The paper dry run checks that a teacher's folder has its weights and, where the fetch wrote
it, every file at the size it verified; a refusal names the instruction that remakes it. Before,
a teacher folder cut after its config and tokenizer passed ("models: 3 encoder/teacher folder(s)
found ... everything checked") and the run failed loading it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator import ablate
from tests.orchestrator.refusing import refused
from tests.trainables.hub_server import Serving, paper_hub
from trainables import fetch
from trainables.config import stores

SIMCSE = f"{stores.TEACHERS_DIR}/{stores.TEACHER_DIRS['simcse']}"
RANKCSE = f"{stores.TEACHERS_DIR}/{stores.TEACHER_DIRS['rankcse']}"
DRY = ["--grid", "dalr_table2", "--profile", "paper", "--dry-run"]


@pytest.fixture
def layout(tmp_path, monkeypatch, tiny_bert) -> tuple[Path, Path]:
    """$MMEMB_DATA with what dalr_table2 reads present by name (the per-file checks come after
    the model check), its two teachers fetched from the stand-in hub; the student a local
    folder (a local folder wins over the hub)."""
    from huggingface_hub import constants

    data, work = tmp_path / "data", tmp_path / "work"
    monkeypatch.setenv("MMEMB_DATA", str(data))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with Serving(paper_hub()) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        assert fetch.main(["paper", "--no-progress", "--only", "simcse", "diffcse"]) == 0
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    (data / stores.SENTEVAL_DIR).mkdir(parents=True)
    for name in (stores.TEXT_FILE, stores.PAPER_STORE, stores.MCSE_STORE):
        (data / name).write_text("present by name\n")
    work.mkdir()
    shutil.copytree(tiny_bert, work / "bert-base-uncased")
    return data, work


def test_a_teacher_without_weights_is_refused_naming_the_fetch_that_remakes_it(
        layout, capsys, monkeypatch):
    data, work = layout
    (data / SIMCSE / "model.safetensors").unlink()
    line = refused(work, ablate.main, DRY, f"{data / SIMCSE} has no weights", capsys, monkeypatch)
    assert "run python -m trainables.fetch paper --only simcse" in line, line


def test_a_fetched_teacher_whose_weights_changed_size_is_refused(layout, capsys, monkeypatch):
    data, work = layout
    with (data / SIMCSE / "model.safetensors").open("r+b") as fh:
        fh.truncate(100)
    line = refused(work, ablate.main, DRY, "is not as the fetch verified it", capsys, monkeypatch)
    assert "size differs" in line and "--only simcse" in line, line


def test_a_folder_brought_by_hand_names_its_instruction(tmp_path):
    """RankCSE is brought by hand: its refusal names the fetch's instruction for it."""
    from trainables.fetch.folders import incomplete

    folder = tmp_path / RANKCSE
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    line = incomplete(folder, tmp_path)
    assert line.startswith(f"model folder {folder} has no weights") and \
        "python -m trainables.fetch paper --only rankcse says" in line, line
    (folder / "pytorch_model.bin").write_bytes(b"weights")
    assert incomplete(folder, tmp_path) is None
