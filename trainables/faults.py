"""Fault injection for resilience tests: kill a worker, poison the loss, or fake an OOM.

Set ``MMEMB_FAULT_INJECT`` to ``KIND:STEP[:CONFIG_HASH]`` (KIND one of ``kill``, ``nan``,
``oom``). ``kill`` fires once per run (a marker in ``MMEMB_FAULT_MARKER_DIR`` lets the restarted
run through, as a real crash would); ``nan`` and ``oom`` fire every time, as real ones recur.
Unset, this module does nothing: production runs never pay for it.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "MMEMB_FAULT_INJECT"
MARKER_ENV = "MMEMB_FAULT_MARKER_DIR"


def forwarded_env() -> dict[str, str]:
    """The fault settings to pass on to Ray workers (empty when unset)."""
    return {k: os.environ[k] for k in (ENV, MARKER_ENV) if k in os.environ}


def maybe_inject(step: int, config_hash: str) -> str | None:
    """Fire the configured fault at ``step`` (1-based); returns the kind for 'nan', else None."""
    spec = os.environ.get(ENV)
    if not spec:
        return None
    kind, at, *target = spec.split(":")
    if int(at) != step or (target and target[0] != config_hash):
        return None
    if kind == "kill":
        marker = Path(os.environ.get(MARKER_ENV, "/tmp")) / f"fault-kill-{config_hash}"
        if marker.exists():
            return None  # fired once already: the restarted run goes through
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(step))
        os._exit(1)  # a hard process death, as a preempted or crashed worker
    if kind == "oom":
        import torch

        raise torch.OutOfMemoryError(f"CUDA out of memory (injected at step {step})")
    if kind == "nan":
        return "nan"
    raise ValueError(f"{ENV}={spec!r}: unknown fault kind {kind!r}; use kill, nan or oom")
