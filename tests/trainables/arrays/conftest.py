"""Fixtures every array test shares."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A module's model cache (derived students, tokenised data): built once per test file."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def one_thread():
    # One torch thread: on a shared 2-core machine a second spinning thread costs more than it
    # gives, and the arrays' float results must not depend on the thread count's reduction order.
    torch.set_num_threads(1)
