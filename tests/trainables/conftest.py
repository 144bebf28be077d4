"""The fetch tests' stand-in world: $MMEMB_DATA and the Hugging Face cache in tmp_path, and the
command run against a stand-in hub (tests/trainables/hub_server.py)."""

from __future__ import annotations

import pytest

from trainables import fetch


@pytest.fixture
def env(tmp_path, monkeypatch):
    """$MMEMB_DATA and the Hugging Face cache in tmp_path; the hub online (the suite sets it
    offline) but only at the stand-in's address, set per test."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(fetch.places, "ENDPOINT", "http://127.0.0.1:9")  # never the real hub
    return tmp_path


def run(url, monkeypatch, *args):
    monkeypatch.setenv("HF_ENDPOINT", url)
    return fetch.main(["paper", "--no-progress", *args])
