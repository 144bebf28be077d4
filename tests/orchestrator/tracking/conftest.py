"""The tracking tests' shared store: a fresh sqlite MLflow store per test."""

from __future__ import annotations

import pytest

from orchestrator.tracking.client import Tracker


@pytest.fixture()
def tracker(tmp_path):
    return Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
