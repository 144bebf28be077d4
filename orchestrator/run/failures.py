"""How a campaign's failures are told: each in one line, with what to do next.

The runs of a table can fail for a reason in their settings or their method (a member that could
not be set up, a step that raised, a NaN at a fixed seed, a filter that masks every negative):
``--resume`` alone would fail them the same way, so ``closing_advice`` says to fix those first.
The campaign itself can fail because the disk filled up (``DiskFull``, its line from
``disk.py``) or because Ray's memory monitor killed its workers (``MemoryShort``: the cause in one
line instead of Ray's page-long report).
"""

from __future__ import annotations

from collections.abc import Sequence

DETERMINISTIC = ("could not be set up", "failed at step", "non-finite loss",
                 "threshold filter masked every negative")
"""reasons a run fails the same way every time (its settings, its method's code, its seed): a
``--resume`` alone would repeat them (``trainables/arrays/``: build.py, batched.py and
finite_check.py word them)"""


def closing_advice(reasons: Sequence[str]) -> str:
    """What to do about the failed runs: fix a deterministic failure (the report's 'Failed runs'
    names each), resume after anything else (a worker, a node or the driver that died)."""
    fixed = [r for r in reasons if any(d in r for d in DETERMINISTIC)]
    if reasons and len(fixed) == len(reasons):
        return (f"{len(fixed)} run(s) failed for a reason in their settings or method (see "
                "'Failed runs' above): --resume alone would fail them the same way; fix the "
                "setting or the method first, then run the same command with --resume to train "
                "only those")
    if fixed:
        return (f"some runs failed: {len(fixed)} for a reason in their settings or method (fix "
                "those first, see 'Failed runs' above), the others for reasons a rerun can get "
                "past; run the same command with --resume to run only the failed ones")
    return "some runs failed; run the same command with --resume to run only those"


class DiskFull(OSError):
    """The disk filled up under a campaign; the message is the one line to print."""


class MemoryShort(OSError):
    """Ray's memory monitor killed the campaign's actors (the machine ran low on memory); the
    message is the one line to print, not Ray's page-long report of the workers it killed."""


def memory_short(text: str) -> str | None:
    """The one-line cause when ``text`` (an error out of Tune) is Ray's out-of-memory kill."""
    import re

    if "running low on memory" not in text and "OutOfMemoryError" not in text:
        return None
    killed = re.search(r"(\d+) worker\(s\) were killed", text)
    used = re.search(r"was ([\d.]+GB) used / ([\d.]+GB) limit", text)
    return ("this machine ran out of memory: Ray killed "
            + (f"{killed.group(1)} worker(s)" if killed else "the run's workers")
            + (f" ({used.group(1)} used of {used.group(2)})" if used else ""))
