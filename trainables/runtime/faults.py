"""Fault injection for resilience tests: kill a worker, poison the loss, or fake an OOM.

Set ``MMEMB_FAULT_INJECT`` to ``KIND:STEP[:CONFIG_HASH]`` (KIND one of ``kill``, ``nan``,
``oom``). ``kill`` fires once per array (a marker in ``MMEMB_FAULT_MARKER_DIR`` lets the restarted
run through, as a real crash would); ``nan`` and ``oom`` fire every time, as real ones recur.
Unset, this module does nothing: production runs never pay for it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

ENV = "MMEMB_FAULT_INJECT"
MARKER_ENV = "MMEMB_FAULT_MARKER_DIR"


def forwarded_env() -> dict[str, str]:
    """The fault settings to pass on to Ray workers (empty when unset)."""
    return {k: os.environ[k] for k in (ENV, MARKER_ENV) if k in os.environ}


def maybe_inject(step: int, config_hashes: Sequence[str]) -> set[str]:
    """Fire the configured fault at ``step`` (1-based) in an array of members with these config
    hashes; returns the hashes whose loss to poison ('nan'), else an empty set.

    ``kill`` takes the whole process down once per array (a worker dies, not a member); a target
    hash limits any fault to the array holding it (and 'nan' to that member alone).
    """
    spec = os.environ.get(ENV)
    if not spec:
        return set()
    kind, at, *target = spec.split(":")
    hit = [h for h in config_hashes if not target or h == target[0]]
    if int(at) != step or not hit:
        return set()
    if kind == "kill":
        name = target[0] if target else hashlib.sha256(",".join(sorted(config_hashes)).encode()).hexdigest()[:12]
        marker = Path(os.environ.get(MARKER_ENV, "/tmp")) / f"fault-kill-{name}"
        if marker.exists():
            return set()  # fired once already: the restarted run goes through
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(step))
        os._exit(1)  # a hard process death, as a preempted or crashed worker
    if kind == "oom":
        import torch

        raise torch.OutOfMemoryError(f"CUDA out of memory (injected at step {step})")
    if kind == "nan":
        return set(hit)
    raise ValueError(f"{ENV}={spec!r}: unknown fault kind {kind!r}; use kill, nan or oom")
