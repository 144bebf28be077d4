"""``python -m trainables.fetch``: against a stand-in hub on 127.0.0.1 only (tests/trainables/
hub_server.py). A full fetch, a second run that downloads nothing, a resumed download, a corrupt
download retried once then refused, the advice per failure (a file, a revision or a repository
the source no longer has; a network failure) with the other items going on, the refusals before
anything is written (not a folder, read-only, no room: tar and its unpacked copy counted), a disk
that fills while unpacking, the lock two fetches share, the modes and links it writes, and the
dry run with no network.

Read-only folders and small disks are real where this machine allows it: a read-only bind mount
or a small tmpfs in a mount namespace of the fetch's own (``unshare --mount``; as root a chmod
would not bite), or a chmod for a user who is not root; the tests skip where neither can be made.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from tests.trainables.conftest import run
from tests.trainables.hub_server import COMMIT, Serving, paper_hub, senteval_tar
from trainables import fetch

ROOT = Path(__file__).resolve().parents[2]
usage = namedtuple("usage", "total used free")


def summary(out: str) -> str:
    (line,) = [ln for ln in out.splitlines() if ln.startswith("summary: ")]
    return line


def one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --- the full fetch -----------------------------------------------------------------------------
def test_full_fetch_lands_every_file_checked_and_a_second_run_downloads_nothing(
        env, monkeypatch, capsys):
    hub = paper_hub()
    old = os.umask(0o002)  # a data folder a group shares
    try:
        hub.repos[("dataset", fetch.SIMCSE_DATA)]["senteval.tar"] = senteval_tar(mode=0o600)
        with Serving(hub) as url:
            assert run(url, monkeypatch) == 0
            first = len(hub.requests)
            assert run(url, monkeypatch) == 0
            assert len(hub.requests) == first  # the second run reads the disk only
    finally:
        os.umask(old)
    out = capsys.readouterr().out
    data = env / "data"
    wiki = hub.repos[("dataset", fetch.SIMCSE_DATA)]["wiki1m_for_simcse.txt"]
    assert (data / "wiki1m_for_simcse.txt").read_bytes() == wiki
    for task in fetch.SENTEVAL_TASKS:
        unpacked = data / "senteval/downstream" / task / "data.txt"
        assert stat.S_IMODE(unpacked.stat().st_mode) == 0o664, task  # the umask, not the tar's 0600
    assert stat.S_IMODE((data / "wiki1m_for_simcse.txt").stat().st_mode) == 0o664
    assert not (data / ".fetch/senteval.tar").exists()  # unpacked, then removed
    assert not (data / ".fetch/lock").exists()  # no lock left behind
    teacher = data / "teachers/unsup-simcse-bert-base-uncased"
    assert sorted(p.name for p in teacher.iterdir()) == ["config.json", "model.safetensors",
                                                          "vocab.txt"]
    # the students in the cache's own layout: found offline by name
    from huggingface_hub import try_to_load_from_cache

    got = try_to_load_from_cache("bert-base-uncased", "model.safetensors",
                                 cache_dir=str(env / "hf"))
    assert got and Path(got).read_bytes() == bytes(range(256)) * 64
    clip = data / "teachers/clip-vit-large-patch14"
    assert not os.path.isabs(os.readlink(clip)) and (clip / "config.json").is_file()
    man = json.loads((data / ".fetch/manifest.json").read_text())
    assert man["files"]["wiki1m:wiki1m_for_simcse.txt"]["sha256"] == hashlib.sha256(wiki).hexdigest()
    assert man["items"]["simcse"]["commit"] == COMMIT
    assert "wiki1m: fetched" in out and "wiki1m: checked" in out
    runs = [ln for ln in out.splitlines() if ln.startswith("summary: ")]
    assert runs[0].startswith("summary: fetched 8 (wiki1m, senteval, bert-base-uncased, "
                              "roberta-base, simcse, diffcse, resnet-50, clip), checked 0, skipped 0, failed 0")
    assert runs[1].startswith("summary: fetched 0, checked 8 (")
    # what cannot be scripted: one instruction each, with the command that makes the store
    assert ("python -m trainables.convert clip-json --json $MMEMB_DATA/flickr30k_ViT_L14.json "
            "--out $MMEMB_DATA/flickr30k_clip_vitl14.parquet") in out
    assert "by hand: 0 of 5 required present (missing: flickr30k_clip_vitl14.parquet, " \
           "flickr30k_clip_vitl14.parquet column resnet, flickr30k_mcse_resnet50.parquet" in runs[1]


def test_the_data_folder_and_its_cache_move_together(env, monkeypatch):
    """The CLIP teacher under teachers/ is a relative link: a folder holding $MMEMB_DATA and the
    cache can be moved or copied as a whole."""
    hub = paper_hub()
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "clip") == 0
    moved = env.parent / "moved"
    shutil.move(str(env), str(moved))
    monkeypatch.setenv("MMEMB_DATA", str(moved / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(moved / "hf"))
    assert (moved / "data/teachers/clip-vit-large-patch14/config.json").is_file()
    assert run("http://127.0.0.1:9", monkeypatch, "--only", "clip") == 0  # checked, no network


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


# --- corrupted downloads ------------------------------------------------------------------------
def test_a_download_corrupted_once_is_fetched_again_in_the_same_run(env, monkeypatch, capsys):
    hub = paper_hub()
    hub.faults["wiki1m_for_simcse.txt"] = ["corrupt"]  # the first request only
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m") == 0
    out, err = capsys.readouterr()
    assert hub.downloads("wiki1m_for_simcse.txt") == [None, None] and err == ""
    assert "the download fails its check (sha256 differs" in out and "once more" in out
    assert "fetched 1 (wiki1m)" in summary(out)


def test_a_download_corrupted_twice_is_refused_by_its_checksum_and_not_kept(
        env, monkeypatch, capsys):
    hub = paper_hub()
    hub.corrupt.add("wiki1m_for_simcse.txt")  # every request
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m") == 1
    out, err = capsys.readouterr()
    line = one_error(err)
    assert line.startswith("failed: wiki1m wiki1m_for_simcse.txt: http://127.0.0.1:") and \
        "/resolve/" in line and "failed its check twice (sha256 differs" in line, line
    assert "run the same command again" not in line
    assert hub.downloads("wiki1m_for_simcse.txt") == [None, None]  # retried once, then said
    assert list((env / "data").glob("wiki1m*")) == []
    assert not (env / "data/.fetch/manifest.json").exists()
    assert "failed 1 (wiki1m)" in summary(out)


# --- the network --------------------------------------------------------------------------------
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
        line = one_error(capsys.readouterr().err)
        assert "the download stopped at 5,000 of" in line and "run the same command again" in line
        assert (env / "data/wiki1m_for_simcse.txt.part").stat().st_size == 5000
        hub.cut.clear()
        assert run(url, monkeypatch, "--only", "wiki1m") == 0
    assert hub.downloads("wiki1m_for_simcse.txt")[-1] == "bytes=5000-"
    assert (env / "data/wiki1m_for_simcse.txt").is_file()


def test_a_server_error_and_a_dropped_listing_say_run_again_and_the_others_go_on(
        env, monkeypatch, capsys):
    hub = paper_hub()
    hub.faults["wiki1m_for_simcse.txt"] = ["503"] * fetch.RETRIES
    hub.faults["api:google-bert/bert-base-uncased"] = ["drop"]  # once: the rerun lists it
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m", "bert-base-uncased", "simcse") == 1
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        assert len(lines) == 2 and "Traceback" not in err, err
        assert lines[0].startswith("failed: bert-base-uncased: cannot list http://127.0.0.1:") and \
            "check the connection (or $HF_ENDPOINT) and run the same command again" in lines[0]
        assert lines[1].startswith("failed: wiki1m wiki1m_for_simcse.txt: the download stopped at "
                                   "0 of") and "(HTTP 503)" in lines[1] and "run the same command "\
            "again" in lines[1], lines[1]
        assert summary(out).startswith("summary: fetched 1 (simcse), checked 0, skipped 5 (senteval, "
                                       "roberta-base, diffcse, resnet-50, clip: not in --only)")
        assert "failed 2 (bert-base-uncased, wiki1m)" in summary(out)
        assert run(url, monkeypatch, "--only", "wiki1m", "bert-base-uncased", "simcse") == 0
    assert "fetched 2 (wiki1m, bert-base-uncased), checked 1 (simcse)" in summary(
        capsys.readouterr().out)


# --- a source that no longer has it: the address, and why running again will not help -----------
def test_a_file_the_source_no_longer_has_names_its_url_and_the_override(env, monkeypatch, capsys):
    hub = paper_hub()
    hub.faults["wiki1m_for_simcse.txt"] = ["404"]
    with Serving(hub) as url:
        assert run(url, monkeypatch) == 1
    out, err = capsys.readouterr()
    line = one_error(err)
    wiki_url = (f"{url}/datasets/{fetch.SIMCSE_DATA}/resolve/{COMMIT}/wiki1m_for_simcse.txt")
    assert line.startswith(f"failed: wiki1m wiki1m_for_simcse.txt: {wiki_url} answers 404: the "
                           "source no longer has this file; running again will not help"), line
    assert "--only wiki1m --revision wiki1m=main" in line and "run the same command" not in line
    assert hub.downloads("wiki1m_for_simcse.txt") == [None]  # a 404 is not retried
    assert "fetched 7 (senteval, bert-base-uncased" in summary(out)  # the others went on
    assert "failed 1 (wiki1m)" in summary(out)


def test_a_pinned_revision_gone_upstream_says_how_to_override_the_pin(env, monkeypatch, capsys):
    hub = paper_hub()
    hub.gone_revisions.add(fetch.SIMCSE_DATA_REV)
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m", "simcse") == 1
        out, err = capsys.readouterr()
        line = one_error(err)
        assert line.startswith(f"failed: wiki1m: {url}/datasets/{fetch.SIMCSE_DATA}/tree/"
                               f"{fetch.SIMCSE_DATA_REV}: the source no longer has revision "
                               f"{fetch.SIMCSE_DATA_REV}; running again will not help"), line
        assert "python -m trainables.fetch paper --only wiki1m --revision wiki1m=main" in line
        assert "fetched 1 (simcse)" in summary(out)
        assert run(url, monkeypatch, "--only", "wiki1m", "--revision", "wiki1m=main") == 0
    assert ("GET", f"/api/datasets/{fetch.SIMCSE_DATA}/revision/main?blobs=true", None) in \
        hub.requests
    man = json.loads((env / "data/.fetch/manifest.json").read_text())
    assert man["items"]["wiki1m"]["commit"] == COMMIT  # what main pointed at, recorded


def test_a_revision_the_user_named_that_is_gone_says_to_name_another(env, monkeypatch, capsys):
    hub = paper_hub()
    hub.gone_revisions.add("v0.9")
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "senteval", "--revision", "senteval=v0.9") == 1
    line = one_error(capsys.readouterr().err)
    assert line.startswith(f"failed: senteval: {url}/datasets/{fetch.SIMCSE_DATA}/tree/v0.9: the "
                           "source no longer has revision v0.9; running again will not help: v0.9 "
                           "is the revision --revision named; name one the repository has "
                           "(--revision senteval=main for its newest)"), line


def test_a_repository_the_hub_no_longer_has_is_named_and_the_others_go_on(env, monkeypatch, capsys):
    hub = paper_hub()
    del hub.repos[("model", "voidism/diffcse-bert-base-uncased-sts")]
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "diffcse", "simcse") == 1
    out, err = capsys.readouterr()
    line = one_error(err)
    assert line.startswith(f"failed: diffcse: {url}/voidism/diffcse-bert-base-uncased-sts: the "
                           "source no longer has the repository voidism/diffcse-bert-base-"
                           "uncased-sts (the hub answers 404"), line
    assert "running again will not help" in line and "teachers/DiffCSE-bert-base-uncased/" in line
    assert "run the same command" not in line
    assert "fetched 1 (simcse)" in summary(out) and "failed 1 (diffcse)" in summary(out)


def test_an_unknown_revision_override_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as e:
        fetch.main(["paper", "--revision", "nope=main"])
    line = one_error(capsys.readouterr().err)
    assert e.value.code == 2 and line.startswith("error: argument --revision: 'nope=main': "
                                                 "expected ITEM=REVISION with ITEM one of wiki1m")


# --- refusals before anything is written --------------------------------------------------------
def test_offline_mode_is_refused_with_the_fix(env, monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert fetch.main(["paper", "--only", "wiki1m"]) == 2
    assert "HF_HUB_OFFLINE=0" in one_error(capsys.readouterr().err)
    assert not (env / "data").exists()


@pytest.mark.parametrize("dry", [False, True])
@pytest.mark.parametrize("which", ["data", "cache"])
def test_a_target_that_is_a_file_is_refused_in_one_line(which, dry, env, monkeypatch, capsys):
    (env / which).write_text("not a folder\n")
    monkeypatch.setenv("MMEMB_DATA", str(env / ("data" if which == "data" else "data-dir")))
    monkeypatch.setenv("HF_HUB_CACHE", str(env / ("cache" if which == "cache" else "hf")))
    assert fetch.main(["paper", "--only", "wiki1m", "clip", *(["--dry-run"] if dry else [])]) == 2
    line = one_error(capsys.readouterr().err)
    what = ("$MMEMB_DATA" if which == "data" else "the Hugging Face cache")
    assert line == (f"error: {what} {env / which} cannot be a folder: {env / which} is a file; "
                    f"point {'MMEMB_DATA (or --data)' if which == 'data' else 'HF_HUB_CACHE'} at "
                    "a folder (it is made if missing)"), line
    assert not (env / "data-dir").exists() and not (env / "hf").exists()


def test_a_folder_below_a_file_is_refused_too(env, monkeypatch, capsys):
    (env / "data").write_text("a file\n")
    assert fetch.main(["paper", "--dry-run", "--data", str(env / "data" / "inner")]) == 2
    assert f"{env / 'data'} (above it) is a file" in one_error(capsys.readouterr().err)


def test_a_disk_too_small_for_the_tar_and_its_unpacked_copy_is_refused_up_front(
        env, monkeypatch, capsys):
    hub = paper_hub()
    tar = len(hub.repos[("dataset", fetch.SIMCSE_DATA)]["senteval.tar"])
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 0, tar + tar // 2))
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "senteval") == 2
        line = one_error(capsys.readouterr().err)
        assert line.startswith(f"error: {fetch._size(2 * tar)} needed on the disk of ") and \
            "(senteval.tar, its unpacked copy (senteval/downstream/))" in line and \
            f"{fetch._size(tar + tar // 2)} free" in line and "larger disk" in line, line
        assert hub.downloads("senteval.tar") == []
        assert not (env / "data").exists()  # nothing written: no .fetch, no lock
        monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 0, 2 * tar))
        assert run(url, monkeypatch, "--only", "senteval") == 0


def test_a_disk_that_fills_while_unpacking_stops_in_one_line_and_keeps_the_tar(
        env, monkeypatch, capsys):
    """ENOSPC raised where tarfile writes a member's bytes: the fetch's own handling runs as on a
    full disk; a run after space is freed unpacks the kept tar without downloading it again."""
    import errno
    import tarfile

    real = tarfile.TarFile.makefile

    def full(self, tarinfo, targetpath):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "makefile", full)
    hub = paper_hub()
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m", "senteval") == 2
        out, err = capsys.readouterr()
        line = one_error(err)
        assert line.startswith("error: senteval: no space left on the disk while unpacking "
                               "senteval.tar into ") and "No space left on device" in line, line
        assert "the verified senteval.tar is kept in" in line and "run the same command again" in line
        assert "fetched 1 (wiki1m)" in summary(out) and "failed 1 (senteval)" in summary(out)
        data = env / "data"
        assert (data / ".fetch/senteval.tar").is_file() and not list(data.rglob(".unpack-*"))
        assert not (data / "senteval").exists() and not (data / ".fetch/lock").exists()
        monkeypatch.setattr(tarfile.TarFile, "makefile", real)
        assert run(url, monkeypatch, "--only", "wiki1m", "senteval") == 0
    assert hub.downloads("senteval.tar") == [None]  # not downloaded again
    assert (data / "senteval/downstream/STS/STSBenchmark/data.txt").is_file()


# --- read-only folders and small disks, for real ---------------------------------------------------
def _namespace(tmp_path: Path) -> list[str] | None:
    """A prefix that runs a command in a mount namespace of its own where it may mount a tmpfs
    (as root, or as a user mapped to root), or None where neither works."""
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    for prefix in (["unshare", "--mount"], ["unshare", "--mount", "--map-root-user"]):
        try:
            ok = subprocess.run([*prefix, "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$1"', "sh",
                                 str(probe)], capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return None
        if ok:
            return prefix
    return None


def _fetch_command(*argv: str, free: int | None = None) -> list[str]:
    """``python -m trainables.fetch paper ...``; ``free``: shutil.disk_usage reports that many
    bytes free (a check passed, for a disk that then fills)."""
    code = "import sys\n"
    if free is not None:
        code += ("import collections, shutil\nU = collections.namedtuple('U', 'total used free')\n"
                 f"shutil.disk_usage = lambda p: U(1 << 40, 0, {free})\n")
    code += "from trainables.fetch import main\nsys.exit(main(sys.argv[1:]))\n"
    return [sys.executable, "-c", code, "paper", "--no-progress", *argv]


def _run(cmd: list[str], url: str, data: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MMEMB_DATA": str(data), "HF_HUB_CACHE": str(cache), "HF_ENDPOINT": url,
           "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0", "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _mounted(prefix: list[str], setup: str, cmd: list[str], after: str = "") -> list[str]:
    """``cmd`` run after ``setup`` (shell, mounts) in the namespace; ``after`` runs there too,
    before the mounts go away with it."""
    return [*prefix, "sh", "-c", f'{setup} || exit 97\n"$@"; rc=$?\n{after}\nexit $rc', "sh", *cmd]


def _read_only(tmp_path: Path, folder: Path, cmd: list[str]) -> list[str]:
    """``cmd`` with ``folder`` read-only: a read-only bind mount in a namespace, or a chmod for a
    user who is not root (root writes through a chmod); skip where neither bites."""
    prefix = _namespace(tmp_path)
    if prefix:
        return _mounted(prefix, f'mount --bind "{folder}" "{folder}" && '
                                f'mount -o remount,bind,ro "{folder}"', cmd)
    if os.geteuid() == 0:
        pytest.skip("cannot make a read-only folder here: root, and unshare --mount refused")
    for p in [folder, *folder.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o555)
    return cmd


@pytest.mark.parametrize("which", ["data", "cache"])
def test_a_read_only_target_is_refused_in_one_line_before_anything_is_written(
        which, tmp_path):
    data, cache = tmp_path / "data", tmp_path / "hf"
    target = data if which == "data" else cache
    target.mkdir()
    hub = paper_hub()
    with Serving(hub) as url:
        p = _run(_read_only(tmp_path, target, _fetch_command("--only", "wiki1m", "clip")),
                 url, data, cache)
    assert p.returncode == 2, p.stdout + p.stderr
    line = one_error(p.stderr)
    if which == "data":
        assert line.startswith(f"error: $MMEMB_DATA {data} is not a writable folder (") and \
            "wiki1m, clip are still to fetch; point MMEMB_DATA (or --data) at a folder you can " \
            "write" in line, line
    else:
        assert line.startswith(f"error: the Hugging Face cache {cache} is not a writable folder (")\
            and "clip is stored there; point HF_HUB_CACHE at a folder you can write" in line, line
        assert not data.exists()  # refused before the lock or the manifest
    assert hub.requests == []  # not even a listing


def test_a_complete_read_only_data_folder_is_checked_without_writing(tmp_path):
    """A group's shared, read-only $MMEMB_DATA that is complete needs no fetch: it is checked."""
    data, cache = tmp_path / "data", tmp_path / "hf"
    hub = paper_hub()
    with Serving(hub) as url:
        assert _run(_fetch_command("--only", "wiki1m", "simcse"), url, data, cache).returncode == 0
        before = len(hub.requests)
        p = _run(_read_only(tmp_path, data, _fetch_command("--only", "wiki1m", "simcse")),
                 url, data, cache)
    assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
    assert "checked 2 (wiki1m, simcse)" in summary(p.stdout) and len(hub.requests) == before


def test_a_small_disk_is_refused_up_front_and_one_that_fills_while_unpacking_stops_cleanly(
        tmp_path):
    """A real tmpfs a little larger than senteval.tar: the up-front check counts the tar and its
    unpacked copy and refuses; with that check told there is room (the disk filling after it),
    the unpacking meets ENOSPC for real and stops in one line, the folder as it was."""
    prefix = _namespace(tmp_path)
    if prefix is None:
        pytest.skip("cannot mount a small tmpfs here (unshare --mount refused)")
    hub = paper_hub()
    tar = senteval_tar(pad=16_000)
    hub.repos[("dataset", fetch.SIMCSE_DATA)]["senteval.tar"] = tar
    data, cache = tmp_path / "small", tmp_path / "hf"
    data.mkdir()
    setup = f'mount -t tmpfs -o size={len(tar) * 3 // 2} tmpfs "{data}"'
    listing = tmp_path / "left.txt"
    after = f'find "{data}" -mindepth 1 -printf "%P\\n" | sort > "{listing}"'
    with Serving(hub) as url:
        p = _run(_mounted(prefix, setup, _fetch_command("--only", "senteval"), after), url, data,
                 cache)
        assert p.returncode == 2, p.stdout + p.stderr
        line = one_error(p.stderr)
        assert "(senteval.tar, its unpacked copy (senteval/downstream/))" in line and \
            "larger disk" in line, line
        assert listing.read_text() == "" and hub.downloads("senteval.tar") == []
        p = _run(_mounted(prefix, setup, _fetch_command("--only", "senteval", free=1 << 40), after),
                 url, data, cache)
    assert p.returncode == 2, p.stdout + p.stderr
    line = one_error(p.stderr)
    assert line.startswith("error: senteval: no space left on the disk while unpacking "
                           "senteval.tar") and "No space left on device" in line, line
    assert listing.read_text().split() == [".fetch", ".fetch/senteval.tar"]  # kept, nothing else


# --- two fetches at once --------------------------------------------------------------------------
def test_a_second_fetch_waits_for_the_first_and_no_lock_is_left(env, monkeypatch):
    data = env / "data"
    hub = paper_hub()
    with Serving(hub) as url:
        cmd = [sys.executable, "-u", *_fetch_command("--only", "wiki1m")[1:]]
        with fetch._lock(data, print):  # the first fetch, holding the lock
            env_vars = {**os.environ, "MMEMB_DATA": str(data), "HF_HUB_CACHE": str(env / "hf"),
                        "HF_ENDPOINT": url, "HF_HUB_OFFLINE": "0", "PYTHONPATH": str(ROOT)}
            second = subprocess.Popen(cmd, env=env_vars, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
            seen = []
            for line in second.stdout:  # blocks until the second says it waits (or ends)
                seen.append(line)
                if "another fetch is writing" in line:
                    break
            assert "another fetch is writing" in "".join(seen), "".join(seen)
            assert not (data / "wiki1m_for_simcse.txt").exists()  # it waits, it has not written
        rest, _ = second.communicate(timeout=600)
    assert second.returncode == 0, "".join(seen) + rest
    assert "fetched 1 (wiki1m)" in rest and not (data / ".fetch/lock").exists()


# --- the dry run and the instructions ----------------------------------------------------------------
def test_dry_run_lists_every_file_with_size_checksum_and_source_without_a_network(
        env, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    assert fetch.main(["paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "wiki1m_for_simcse.txt  about 121.0 MB  sha256 as the hub publishes it for LFS files, " \
           "read at download" in out
    assert "pytorch_model.bin)  about 1.25 GB" in out  # DiffCSE's weights (issue 39)
    assert f"/datasets/princeton-nlp/datasets-for-simcse/resolve/{fetch.SIMCSE_DATA_REV}/senteval.tar" in out
    assert "[to fetch]" in out and "by hand" in out
    assert "to fetch: 8 of 8 item(s)" in out and f"$MMEMB_DATA {env / 'data'}: writable" in out
    assert not (env / "data").exists()
    hub = paper_hub()
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "wiki1m") == 0
    capsys.readouterr()
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert fetch.main(["paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    wiki = hub.repos[("dataset", fetch.SIMCSE_DATA)]["wiki1m_for_simcse.txt"]
    assert f"sha256 {hashlib.sha256(wiki).hexdigest()}" in out  # exact, once verified
    assert "wiki1m: Wiki1M" in out and "[present]" in out and "to fetch: 7 of 8" in out


def test_the_instructions_say_which_stores_are_required_and_whether_they_are_there(
        env, monkeypatch, capsys):
    from trainables.config.stores import STORES

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert fetch.main(["paper", "--dry-run", "--only", "mcse-resnet", "coco-clip", "mcse-coco"]) == 0
    lines = [ln.strip() for ln in capsys.readouterr().out.splitlines() if ln.startswith("  ")]
    mcse, coco, mention = lines
    assert mcse.startswith(f"mcse-resnet [missing: {STORES['flickr30k-mcse'].file}; required: the "
                           "MCSE cells (most tables' baseline) of kdmcse_table1, ")
    assert mcse.endswith(f"--out $MMEMB_DATA/{STORES['flickr30k-mcse'].file}")
    assert coco.startswith(f"coco-clip [missing: {STORES['coco'].file}; required: every cell, "
                           "MCSE's too, of kdmcse_table1_coco") and "train_coco_ViT_L14.json" in coco
    assert coco.endswith("python -m trainables.convert clip-json --json $MMEMB_DATA/"
                         f"train_coco_ViT_L14.json --out $MMEMB_DATA/{STORES['coco'].file}")
    assert "coco_random_captions.txt and coco_resnet.hdf5" in mention and "--out" not in mention
    (env / "data").mkdir()
    (env / "data" / STORES["flickr30k-mcse"].file).write_bytes(b"stand-in")
    assert fetch.main(["paper", "--only", "mcse-resnet"]) == 0  # nothing to fetch: no network
    out = capsys.readouterr().out
    assert f"mcse-resnet [present: {STORES['flickr30k-mcse'].file}; required" in out
    assert "by hand: 1 of 1 required present" in summary(out)
    assert not (env / "data/.fetch").exists()


def test_an_archive_without_transfer_tasks_lands_sts_and_says_what_is_missing(
        env, monkeypatch, capsys):
    from tests.trainables.hub_server import SENTEVAL_DIRS

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
