"""Waiting on conditions, not on time: CI shares two cores with other jobs, so any fixed sleep
or short timeout turns load into failures. The limit only turns a hang into a failure."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

HANG_S = 900.0
"""far above any healthy wait under load; reaching it means the condition never came true"""


def wait_for(cond: Callable[[], T], what: str, limit_s: float = HANG_S, poll_s: float = 0.1) -> T:
    """Poll ``cond`` until it returns something truthy; return that. Fails naming ``what``."""
    deadline = time.monotonic() + limit_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {limit_s:.0f} s for {what}")
        time.sleep(poll_s)
