"""A model folder the fetch writes is complete or not there: a fetch cut during a teacher's or
CLIP's files (a 404 on ``vocab.txt``, Ctrl-C during the weights) leaves no folder under the final
name, and the next run completes it from what the cut one verified. Against the stand-in hub on
127.0.0.1 (tests/trainables/hub_server.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.ctrl_c import sigint_as_at_a_terminal
from tests.trainables.conftest import run
from tests.trainables.hub_server import COMMIT, Serving, paper_hub
from tests.waiting import wait_for
from trainables.config.stores import TEACHER_DIRS, TEACHERS_DIR

ROOT = Path(__file__).resolve().parents[2]
SIMCSE = f"{TEACHERS_DIR}/{TEACHER_DIRS['simcse']}"
CLIP = f"{TEACHERS_DIR}/{TEACHER_DIRS['clip']}"
CLIP_SNAPSHOT = f"models--openai--clip-vit-large-patch14/snapshots/{COMMIT}"


def test_a_404_on_vocab_leaves_no_teacher_folder_and_the_next_run_completes_it(
        env, monkeypatch, capsys):
    hub = paper_hub()
    hub.faults["vocab.txt"] = ["404"]
    with Serving(hub) as url:
        assert run(url, monkeypatch, "--only", "simcse") == 1
        assert "vocab.txt" in capsys.readouterr().err
        assert not (env / "data" / SIMCSE).exists()  # config.json was there, under this name
        assert run(url, monkeypatch, "--only", "simcse") == 0
    folder = env / "data" / SIMCSE
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors",
                                                        "vocab.txt"]
    assert len(hub.downloads("config.json")) == 1  # verified once, kept through the cut
    assert [p.name for p in (env / "data" / TEACHERS_DIR).iterdir()] == [TEACHER_DIRS["simcse"]]


@pytest.mark.slow  # two fetch processes each, a real SIGINT: about 15 s under load
@pytest.mark.parametrize(("item", "final"), [("simcse", SIMCSE), ("clip", CLIP)])
def test_ctrl_c_during_the_weights_leaves_no_model_folder(env, item, final):
    """A real SIGINT to a fetch whose weights download is under way; CLIP's snapshot in the
    cache and its link under teachers/ are absent too, then the next run completes both."""
    hub = paper_hub()
    hub.hold["model.safetensors"] = release = threading.Event()
    data, cache = env / "data", env / "hf"
    with Serving(hub) as url:
        env_vars = {**os.environ, "MMEMB_DATA": str(data), "HF_HUB_CACHE": str(cache),
                    "HF_ENDPOINT": url, "HF_HUB_OFFLINE": "0", "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "trainables.fetch", "paper",
                                 "--no-progress", "--only", item], env=env_vars,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=sigint_as_at_a_terminal)
        try:
            wait_for(lambda: hub.downloads("model.safetensors") or proc.poll() is not None,
                     "the fetch to start downloading the weights")
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=600)
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, out + err
        assert "interrupted; run the same command again" in err
        assert not (data / final).exists() and not (data / final).is_symlink()
        if item == "clip":
            assert not (cache / CLIP_SNAPSHOT).exists()
        hub.hold.clear()
        done = subprocess.run([sys.executable, "-m", "trainables.fetch", "paper", "--no-progress",
                               "--only", item], env=env_vars, capture_output=True, text=True,
                              timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (data / final / "model.safetensors").is_file()
    assert (data / final / "vocab.txt").is_file()
    if item == "clip":
        assert (cache / CLIP_SNAPSHOT / "config.json").is_file()
        assert not (cache / CLIP_SNAPSHOT).parent.parent.joinpath(".fetching").exists()
    else:
        assert not (data / TEACHERS_DIR / f".{TEACHER_DIRS['simcse']}.fetching").exists()
