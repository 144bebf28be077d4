"""An ``--address`` nobody answers is refused in seconds, not left to Ray's reconnect loop.

``ray.init(address=...)`` on an address where no cluster listens retries the cluster's GCS for
minutes, printing only Ray's internal warnings. Before joining, the address Ray would use (a
``$RAY_ADDRESS`` wins over the one given, as in Ray; ``auto`` is what ``ray start`` recorded on
this machine) is probed with a plain TCP connection: a GCS, or a Ray Client server for
``ray://``, accepts one at once. Nothing listening, or no route there, is one line naming the
address and the command that checks it.
"""

from __future__ import annotations

import contextlib
import socket
import time

PROBE_S = 10.0
"""how long the address may take to accept a connection (a loaded head answers in well under 1 s)"""


def resolved(address: str) -> str | None:
    """host:port that ``ray.init(address)`` would connect to; None where Ray decides (a local
    instance, ``auto`` with nothing recorded)."""
    if address in ("local", ""):
        return None
    try:
        from trainables.runtime.ray_private import address_from_environment

        found = address_from_environment(address)
    except Exception:  # no cluster recorded here: Ray's own error says so at once
        return None
    if not found or found in ("auto", "local"):
        return None
    return found.split("://", 1)[1] if "://" in found else found


def split(hostport: str) -> tuple[str, int] | None:
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check(address: str | None, timeout_s: float | None = None) -> None:
    """Raise ConnectionError, in one line, when nothing answers at the cluster ``address``."""
    if not address:
        return
    target = resolved(address)
    where = split(target) if target else None
    if where is None:
        return
    shown = address if target == address or address.endswith(target) else f"{address} ({target})"
    timeout_s = PROBE_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    why = "no answer"
    while True:
        left = deadline - time.monotonic()
        try:
            with contextlib.closing(socket.create_connection(where, timeout=max(0.5, left))):
                return
        except OSError as e:
            why = e.strerror or type(e).__name__ if not isinstance(e, socket.timeout) else \
                f"no answer in {timeout_s:.0f} s"
        if time.monotonic() + 0.5 >= deadline:
            break
        time.sleep(0.5)  # a head still starting: try again until the deadline
    raise ConnectionError(
        f"no Ray cluster answers at {shown} ({why}); check the address with `ray status "
        f"--address {target}` on a machine of the cluster, or start the cluster first "
        "(docs/cluster.md)")
