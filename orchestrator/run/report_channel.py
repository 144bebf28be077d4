"""Reports from a Train run to its Tune trial through the GCS's key-value store: no process of its own.

A trial passes on what Train's controller (the run's reports) and rank 0 (its progress) tell it.
A ``ray.util.queue.Queue`` did that through an actor: one more Python process per array, which
imports Ray and lives as long as the run (about 9 CPU seconds each, ``bench/README.md``). The GCS
that every Ray process already talks to keeps a key-value store; a report is one key there.

Order: each writer claims the first free key from its own count upwards (a put that does not
overwrite tells whether the key was taken), so the keys are claimed 0, 1, 2, ... with no gap, in
the order the puts reached the GCS, whoever made them; the reader reads them in that order. Keys
are removed only by :meth:`ReportChannel.shutdown`: a writer whose count is behind must find the
claimed keys still there, or it would write where the reader has passed. A trial killed outright
(its node lost) never calls it: its keys, a few kB of reports, stay until the Ray cluster stops.
"""

from __future__ import annotations

import pickle
import time
import uuid
from queue import Empty
from typing import Any

from trainables.runtime.ray_private import kv_delete_prefix, kv_get, kv_put_new

__all__ = ["Empty", "ReportChannel"]

_SLEEP_S = 0.25  # how often a blocking get looks again (each look is a call to the GCS)


class ReportChannel:
    """A queue of plain values (``put``/``put_nowait``/``get``/``shutdown``, like Ray's Queue).

    Pickled into the controller's callback and rank 0's config: every copy writes to the same
    keys. Only one process reads (the trial).
    """

    def __init__(self, name: str = "") -> None:
        self.prefix = f"mmemb-reports/{name}/{uuid.uuid4().hex}/"
        self._put_at = 0  # where this copy starts looking for a free key
        self._get_at = 0  # the next key the reader reads

    def _key(self, n: int) -> bytes:
        return f"{self.prefix}{n:09d}".encode()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Append ``item``; returns once the GCS holds it (``block``/``timeout``: Queue's
        signature; the store never fills, so a put never waits)."""
        data = pickle.dumps(item)
        n = self._put_at
        while kv_put_new(self._key(n), data):  # taken by another writer: the next one
            n += 1
        self._put_at = n + 1

    def put_nowait(self, item: Any) -> None:
        self.put(item)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """The next item in order; ``queue.Empty`` when none came within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            raw = kv_get(self._key(self._get_at))
            if raw is not None:
                self._get_at += 1
                return pickle.loads(raw)
            if not block or (deadline is not None and time.monotonic() >= deadline):
                raise Empty
            left = _SLEEP_S if deadline is None else max(0.0, deadline - time.monotonic())
            time.sleep(min(_SLEEP_S, left))

    def shutdown(self, force: bool = True) -> None:
        """Remove every key of this channel (``force``: Queue's signature)."""
        kv_delete_prefix(self.prefix.encode())
