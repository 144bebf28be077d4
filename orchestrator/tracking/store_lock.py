"""A sqlite store another process holds locked: how long a command waits for it, how a lock is
told from damage, and the line that names who holds it (never advice to move the file)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

STORE_BUSY_ENV = "MMEMB_STORE_BUSY_S"
STORE_BUSY_S = 30.0
"""how long a command waits for a sqlite store that another process holds locked (a colleague's
long transaction, a ``sqlite3`` shell left in one) before it says so; ``$MMEMB_STORE_BUSY_S``"""
MLFLOW_BUSY_S = 20.0
"""how long MLflow's own sqlite sessions wait for a lock (its ``PRAGMA busy_timeout``)"""


def store_busy_s() -> float:
    """``$MMEMB_STORE_BUSY_S``, or :data:`STORE_BUSY_S`."""
    return seconds_from_env(STORE_BUSY_ENV, STORE_BUSY_S,
                            "how long to wait for a store another process holds locked")


def seconds_from_env(name: str, default: float, what: str) -> float:
    """A wait in seconds from ``$name`` (``default`` where unset or blank); anything but a finite
    number >= 0 is a ValueError whose message is the one line to print."""
    import math

    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"${name}={raw!r} must be a number of seconds >= 0 ({what}); unset it "
                         f"for {default:g} s")
    return value


def is_busy(e: BaseException) -> bool:
    """``e`` (or what it wraps: SQLAlchemy's and MLflow's errors) is SQLite saying another
    connection holds the database locked (SQLITE_BUSY or SQLITE_LOCKED), not that it is damaged."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        code = getattr(e, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF in (5, 6):
            return True
        text = str(e).lower()
        if "database is locked" in text or "database table is locked" in text or \
                "database is busy" in text:
            return True
        e = getattr(e, "orig", None) or e.__cause__ or e.__context__
    return False


OPENED: dict[str, tuple[Path, str]] = {}
"""uri -> (sqlite file, how the command named it), of the stores this process opened: a lock
met later (MLflow's own wait ran out) is named the same way"""


class StoreInUse(ValueError):
    """A sqlite store that another process kept locked for ``waited`` seconds. Its message
    names the processes holding the lock (the kernel's lock table) and says to wait for them or
    stop them; never to move or restore the file: it is not damaged, and a new store beside it
    would split a lab's results in two. The command layer names an mmemb command among them as
    its driver lock does (``orchestrator.run.driver.name_store_users``): :meth:`line`."""

    def __init__(self, path: Path, uri: str, option: str, waited: float):
        from trainables.runtime.filelock import lock_holders

        self.path, self.uri, self.option, self.waited = path, uri, option, waited
        self.holders = lock_holders(path)
        super().__init__(self.line())

    def line(self, known: Mapping[int, str] | None = None, elsewhere: str = "") -> str:
        """``known``: pid -> how to name that process (an mmemb driver); ``elsewhere``: a driver
        of this store that holds no lock this machine shows (it may hold it from another)."""
        from trainables.runtime.filelock import process_line

        known = known or {}
        named = [known.get(pid) or process_line(pid) for pid, _ in self.holders[:3]]
        if named:
            who = (f"{named[0]} holds it locked" if len(named) == 1 else
                   f"{'; '.join(named)} hold it locked")
            fix = (f"wait for {'it' if len(named) == 1 else 'them'} to finish and run this again "
                   f"(or, if it is stuck, stop it: kill {self.holders[0][0]})")
        else:
            who = ("another process holds it locked (none of this machine's processes shows the "
                   + (f"lock; {elsewhere} runs a plan on this store)" if elsewhere else
                      "lock: a program on another machine sharing this folder, or another user's)"))
            fix = "wait for it to finish and run this again"
        return (f"{self.option} {self.uri}: {self.path} is in use: {who}, and did not let go "
                f"within {self.waited:g} s (${STORE_BUSY_ENV} sets the wait); a locked store is not "
                f"damaged, so keep the file where it is: {fix}")


def busy_line(e: BaseException) -> StoreInUse | None:
    """For an error out of MLflow that is a sqlite store's lock (MLflow's own wait ran out): the
    :class:`StoreInUse` of the store this process met last, else None."""
    if not is_busy(e) or not OPENED:
        return None
    uri, (db, where) = next(reversed(OPENED.items()))
    return StoreInUse(db, uri, where, MLFLOW_BUSY_S)


@contextlib.contextmanager
def schema_lock(db: Path | None):
    """Hold a lock beside a sqlite store while its schema and experiment are created."""
    if db is None:
        yield
        return
    from trainables.runtime.filelock import file_lock

    with file_lock(db.with_name(f".{db.name}.lock")):
        yield

