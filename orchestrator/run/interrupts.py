"""Ctrl-C and SIGTERM around the parts of a campaign that Tune does not run.

Tune installs its own SIGINT handler in ``Tuner.fit`` (it sets an event its loop reads) and puts
the previous one back only after a signal came. Once ``fit`` has returned, that handler stays:
a Ctrl-C while the driver wrote the report set an event nobody reads, and the command ended 0
as if nothing had been pressed. :func:`keep_sigint` puts the driver's handler back after each
``fit``; :class:`Deferred` holds an interrupt while the report of a finished table is written (a
half-written report helps no one, and every run has ended), says so at once, and ends the
command with 130 once the report is stored. A second Ctrl-C stops at once.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


def keep_sigint() -> Callable[[], None]:
    """The SIGINT handler now; calling the result puts it back (after Tune's ``fit``)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    before = signal.getsignal(signal.SIGINT)
    return lambda: signal.signal(signal.SIGINT, before)


class Deferred:
    """``with Deferred("the report") as held: ...``: an interrupt inside the block is held until
    it ends (said in a ``note:`` line when it comes); :meth:`exit_code` then turns the block's
    exit code into 130 and says what was done first."""

    def __init__(self, what: str):
        self.what = what
        self.received: str | None = None
        self._before: dict[int, Any] = {}

    def __enter__(self) -> Deferred:
        if threading.current_thread() is threading.main_thread():
            for sig in NAMES:
                self._before[sig] = signal.getsignal(sig)
                signal.signal(sig, self._hold)
        return self

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        name = NAMES.get(signum, f"signal {signum}")
        if self.received is not None:  # asked twice: stop now
            self._restore()
            raise KeyboardInterrupt
        self.received = name
        print(f"\nnote: {name} received while {self.what} is written; it is finished first, then "
              "the command stops (press Ctrl-C again to stop at once)", file=sys.stderr,
              flush=True)

    def _restore(self) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._before = {}

    def __exit__(self, *exc: object) -> bool:
        self._restore()
        return False

    def exit_code(self, rc: int) -> int:
        """``rc``, or 130 after a held interrupt (said in one ``note:`` line)."""
        if self.received is None:
            return rc
        print(f"note: interrupted ({self.received}) while {self.what} was written: it was "
              "finished first; every run had ended, so there is nothing to --resume (exit 130)",
              file=sys.stderr, flush=True)
        return 130
