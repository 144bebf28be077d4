"""``python -m trainables.fetch``: against a stand-in hub on 127.0.0.1 only (tests/trainables/
hub_server.py); a full fetch, a second run that downloads nothing, a resumed download, a corrupt
file refused by its checksum, a server failing mid-file, and the dry run with no network."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.trainables.hub_server import COMMIT, Serving, paper_hub
from trainables import fetch


@pytest.fixture
def env(tmp_path, monkeypatch):
    """$MMEMB_DATA and the Hugging Face cache in tmp_path; the hub online (the suite sets it
    offline) but only at the stand-in's address, set per test."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(fetch, "ENDPOINT", "http://127.0.0.1:9")  # never the real hub
    return tmp_path


def run(url, monkeypatch, *args):
    monkeypatch.setenv("HF_ENDPOINT", url)
    return fetch.main(["paper", "--no-progress", *args])


def test_full_fetch_lands_every_file_checked_and_a_second_run_downloads_nothing(
        env, monkeypatch, capsys):
    hub = paper_hub()
    with Serving(hub) as url:
        assert run(url, monkeypatch) == 0
        first = len(hub.requests)
        assert run(url, monkeypatch) == 0
        assert len(hub.requests) == first  # the second run reads the disk only
    out = capsys.readouterr().out
    data = env / "data"
    wiki = hub.repos[("dataset", fetch.SIMCSE_DATA)]["wiki1m_for_simcse.txt"]
    assert (data / "wiki1m_for_simcse.txt").read_bytes() == wiki
    for task in fetch.SENTEVAL_TASKS:
        assert (data / "senteval/downstream" / task / "data.txt").is_file(), task
    assert not (data / ".fetch/senteval.tar").exists()  # unpacked, then removed
    teacher = data / "teachers/unsup-simcse-bert-base-uncased"
    assert sorted(p.name for p in teacher.iterdir()) == ["config.json", "model.safetensors",
                                                          "vocab.txt"]
    # the students in the cache's own layout: found offline by name
    from huggingface_hub import try_to_load_from_cache

    got = try_to_load_from_cache("bert-base-uncased", "model.safetensors",
                                 cache_dir=str(env / "hf"))
    assert got and Path(got).read_bytes() == bytes(range(256)) * 64
    assert (data / "teachers/clip-vit-large-patch14/config.json").is_file()
    man = json.loads((data / ".fetch/manifest.json").read_text())
    assert man["files"]["wiki1m:wiki1m_for_simcse.txt"]["sha256"] == hashlib.sha256(wiki).hexdigest()
    assert man["items"]["simcse"]["commit"] == COMMIT
    assert "wiki1m: fetched" in out and "wiki1m: checked" in out
    # what cannot be scripted: one instruction each, with the command that makes the store
    assert ("python -m trainables.convert clip-json --json $MMEMB_DATA/flickr30k_ViT_L14.json "
            "--out $MMEMB_DATA/flickr30k_clip_vitl14.parquet") in out


def test_a_file_changed_on_disk_is_fetched_again(env, monkeypatch):
    hub = paper_hub()
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m") == 0
        path = env / "data/wiki1m_for_simcse.txt"
        path.write_bytes(b"x" + path.read_bytes()[1:])  # same size, other bytes
        assert run(url, monkeypatch, "--only", "wiki1m") == 0
    assert hub.downloads("wiki1m_for_simcse.txt") == [None, None]
    assert path.read_bytes() == hub.repos[("dataset", fetch.SIMCSE_DATA)]["wiki1m_for_simcse.txt"]


def test_an_interrupted_download_resumes_with_a_range_request(env, monkeypatch):
    hub = paper_hub()
    wiki = hub.repos[("dataset", fetch.SIMCSE_DATA)]["wiki1m_for_simcse.txt"]
    part = env / "data/wiki1m_for_simcse.txt.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(wiki[:1000])  # what an earlier, interrupted run left
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m") == 0
    assert hub.downloads("wiki1m_for_simcse.txt") == ["bytes=1000-"]
    assert (env / "data/wiki1m_for_simcse.txt").read_bytes() == wiki
    assert not part.exists()


def test_a_corrupt_download_is_refused_by_its_checksum_and_not_kept(env, monkeypatch, capsys):
    hub = paper_hub()
    hub.corrupt.add("wiki1m_for_simcse.txt")
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fetch: wiki1m wiki1m_for_simcse.txt: the downloaded "
                                               "file fails its check (sha256 differs")
    assert list((env / "data").glob("wiki1m*")) == []
    assert "wiki1m" not in json.loads((env / "data/.fetch/manifest.json").read_text()
                                      if (env / "data/.fetch/manifest.json").exists()
                                      else '{"items": {}}')["items"]


def test_a_server_failing_mid_file_is_resumed_in_the_same_run(env, monkeypatch):
    hub = paper_hub()
    hub.cut["wiki1m_for_simcse.txt"], hub.cut_times = 5000, 2
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m") == 0
    assert hub.downloads("wiki1m_for_simcse.txt") == [None, "bytes=5000-", "bytes=5000-"]
    wiki = hub.repos[("dataset", fetch.SIMCSE_DATA)]["wiki1m_for_simcse.txt"]
    assert (env / "data/wiki1m_for_simcse.txt").read_bytes() == wiki


def test_a_server_that_keeps_failing_leaves_a_part_file_the_next_run_resumes(
        env, monkeypatch, capsys):
    hub = paper_hub()
    hub.cut["wiki1m_for_simcse.txt"] = 5000  # every time
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m") == 1
        err = capsys.readouterr().err
        assert "the download stopped at 5000 of" in err and "run the same command again" in err
        assert (env / "data/wiki1m_for_simcse.txt.part").stat().st_size == 5000
        hub.cut.clear()
        assert run(url, monkeypatch, "--only", "wiki1m") == 0
    assert hub.downloads("wiki1m_for_simcse.txt")[-1] == "bytes=5000-"
    assert (env / "data/wiki1m_for_simcse.txt").is_file()


def test_dry_run_lists_every_file_with_size_checksum_and_source_without_a_network(
        env, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    assert fetch.main(["paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "wiki1m_for_simcse.txt  about 120 MB  sha256" in out
    assert f"/datasets/princeton-nlp/datasets-for-simcse/resolve/{fetch.SIMCSE_DATA_REV}/senteval.tar" in out
    assert "[to fetch]" in out and "by hand" in out
    hub = paper_hub()
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m") == 0
    capsys.readouterr()
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert fetch.main(["paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    wiki = hub.repos[("dataset", fetch.SIMCSE_DATA)]["wiki1m_for_simcse.txt"]
    assert f"sha256 {hashlib.sha256(wiki).hexdigest()}" in out  # exact, once verified
    assert "wiki1m: Wiki1M" in out and "[present]" in out


def test_offline_mode_is_named_with_the_fix(env, monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert fetch.main(["paper", "--only", "wiki1m"]) == 1
    assert "HF_HUB_OFFLINE=0" in capsys.readouterr().err


def test_a_disk_too_small_is_said_before_downloading(env, monkeypatch, capsys):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 100, 100))
    hub = paper_hub()
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m") == 1
    err = capsys.readouterr().err
    assert "to download but" in err and "100 B free" in err and "larger disk" in err, err
    assert hub.downloads("wiki1m_for_simcse.txt") == []


def test_an_archive_without_transfer_tasks_lands_sts_and_says_what_is_missing(
        env, monkeypatch, capsys):
    from tests.trainables.hub_server import SENTEVAL_DIRS, senteval_tar

    hub = paper_hub()
    files = hub.repos[("dataset", fetch.SIMCSE_DATA)]
    files["senteval.tar"] = senteval_tar([d for d in SENTEVAL_DIRS if d not in ("MR", "TREC")])
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "senteval") == 0
        assert "senteval.tar has no MR, TREC: the transfer tasks need them" in capsys.readouterr().out
        assert (env / "data/senteval/downstream/STS/STSBenchmark/data.txt").is_file()
        files["senteval.tar"] = senteval_tar([d for d in SENTEVAL_DIRS if d != "SICK"])
        monkeypatch.setenv("MMEMB_DATA", str(env / "other"))
        assert run(url, monkeypatch, "--only", "senteval") == 1
    assert "senteval: senteval.tar lacks SICK" in capsys.readouterr().err
    assert not (env / "other/senteval/downstream").exists()


def test_an_unknown_only_item_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        fetch.main(["paper", "--dry-run", "--only", "wiki1m", "nope"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("error: argument --only: invalid choice: 'nope'") and "wiki1m" in err[0]
