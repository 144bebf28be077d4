"""A full disk, said before and during the fetch: the dry run on a disk without room for what is
still to fetch says the fetch would be refused (exit 2), not just ``0 B free`` and exit 0; a run
the disk stops mid-way lists, in its summary, the items it never tried."""

from __future__ import annotations

import errno
import shutil
import tarfile
from collections import namedtuple

import pytest

from tests.trainables.hub_server import Serving, paper_hub
from trainables import fetch

usage = namedtuple("usage", "total used free")


@pytest.fixture
def env(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no network
    return tmp_path


def test_the_dry_run_on_a_full_disk_says_the_fetch_would_be_refused(env, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9, 0))
    assert fetch.main(["paper", "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert ": writable, 0 B free" in out  # the listing is still shown
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: the fetch would be refused: about ") and \
        "needed on the disk of" in lines[0] and "but it has 0 B free" in lines[0] and \
        "larger disk" in lines[0], lines[0]
    assert "wiki1m" in lines[0] and "clip" in lines[0]
    assert not (env / "data").exists()


def test_the_dry_run_with_room_passes(env, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**12, 0, 10**12))
    assert fetch.main(["paper", "--dry-run"]) == 0


def test_a_disk_that_fills_mid_run_lists_the_items_never_tried(env, monkeypatch, capsys):
    def full(self, tarinfo, targetpath):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "makefile", full)
    hub = paper_hub()
    with Serving(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        assert fetch.main(["paper", "--no-progress", "--only", "wiki1m", "senteval", "simcse",
                           "clip"]) == 2
    out, err = capsys.readouterr()
    (line,) = [ln for ln in out.splitlines() if ln.startswith("summary: ")]
    assert "fetched 1 (wiki1m)" in line and "failed 1 (senteval)" in line, line
    assert "not tried 2 (simcse, clip: the run stopped before them; the same command fetches " \
           "them)" in line, line
    assert hub.downloads("model.safetensors") == []
