"""A Ctrl-C as a terminal delivers it, to a command a test starts.

A shell without job control starts its background jobs (``pytest ... &``, nohup, some CI runners'
scripts) with SIGINT ignored, their children inherit that, and neither Python (it installs no
KeyboardInterrupt handler) nor ssh (it keeps an ignored SIGINT ignored) hears a Ctrl-C then: a
test that sends SIGINT to its command would wait on a command that never hears it. The child gets SIGINT's default back
before Python starts, as an interactive shell gives it."""

from __future__ import annotations

import signal


def sigint_as_at_a_terminal() -> None:
    """``preexec_fn`` for a command the test will interrupt with SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
