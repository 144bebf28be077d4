"""The tracking store is checked before any run starts: a scheme MLflow knows, a local store's
folder and file (writable, a whole SQLite database, not held locked), a database store's driver.
Each refusal is one line naming the URI, the problem and the fix."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from orchestrator.tracking.server import check_reachable
from orchestrator.tracking.store_lock import OPENED, StoreInUse, is_busy, store_busy_s
from orchestrator.tracking.uris import FORMS, SCHEMES, home_path
from orchestrator.tracking.wording import elsewhere, point

FILE_STORE_ENV = "MLFLOW_ALLOW_FILE_STORE"
"""MLflow's own switch that lets it open a file store"""
QUICK_CHECK_BYTES = 256 * 2**20
"""stores up to this size get SQLite's page-by-page check before a command opens them"""


def check_tracking_uri(uri: str, option: str = "--tracking-uri", write: bool = True) -> None:
    """One line naming the URI, the problem and the fix, before any store is opened or created:
    a scheme MLflow does not know, a local store whose folder is missing or read-only, a store
    file that is not a whole SQLite database or that another process keeps locked, a server that
    does not answer. ``write``: the command will write to the store (``best`` only reads)."""
    from mlflow.utils.uri import get_uri_scheme

    from trainables.runtime.command_line import unexpanded_home

    scheme = get_uri_scheme(uri)
    if scheme and scheme not in SCHEMES:
        raise ValueError(f"{option} {uri}: MLflow has no {scheme!r} store; use {FORMS}")
    if scheme == "sqlite":
        if not uri.startswith("sqlite:///") or uri in ("sqlite:///", "sqlite:///:memory:"):
            raise ValueError(f"{option} {uri}: not a sqlite file (an in-memory store loses every "
                             "run when the command ends); use sqlite:///PATH/mlflow.db")
        path = uri.removeprefix("sqlite:///")
        if path.startswith("~"):
            unexpanded_home(path, option, uri, f"sqlite:///{home_path(path)}")
        _check_local(Path(path), uri, option)
        _check_sqlite_file(Path(path), uri, option, write)
    elif scheme and scheme.split("+")[0] in ("postgresql", "mysql", "mssql"):
        _check_driver(uri, option)
    elif scheme in ("", "file"):  # a file store: the URI names its folder
        path = urllib.parse.urlparse(uri).path if scheme else uri
        if os.environ.get(FILE_STORE_ENV, "").lower() not in ("true", "1"):
            # MLflow 3 refuses to open one (even to read), so the real run would stop here
            raise ValueError(f"{option} {uri}: MLflow 3 keeps file stores in maintenance and "
                             "refuses to open them; use sqlite:///PATH/mlflow.db (mlflow "
                             f"migrate-filestore moves an existing one), or set "
                             f"{FILE_STORE_ENV}=true to use it anyway")
        if path.startswith("~"):
            unexpanded_home(path, option, uri, home_path(path))
        _check_local(Path(path), uri, option)
    check_reachable(uri)


def _check_local(path: Path, uri: str, option: str) -> None:
    """The store file (or folder) ``path`` can be created or written where the URI says."""
    folder = path.absolute().parent
    if path.is_dir():
        raise ValueError(f"{option} {uri}: {path} is a folder, not a store file; name a file "
                         f"inside it (sqlite:///{path}/mlflow.db)")
    taken = next((p for p in [folder, *folder.parents] if p.exists()), None)
    if taken is not None and not taken.is_dir():
        raise ValueError(f"{option} {uri}: {taken} is a file, so no folder can be made there; "
                         f"{elsewhere(option)}")
    if not folder.is_dir():
        raise ValueError(f"{option} {uri}: folder {folder} does not exist; create it "
                         f"(mkdir -p {folder}) or {elsewhere(option)}")
    from trainables.runtime.command_line import writable_folder

    try:
        writable_folder(folder, option)
    except ValueError:
        writable = False
    else:
        writable = not path.exists() or os.access(path, os.W_OK)
    if not writable:
        raise ValueError(f"{option} {uri}: {path if path.exists() else folder} is not writable; "
                         f"fix its permissions or {elsewhere(option)}")


def _check_sqlite_file(path: Path, uri: str, option: str, write: bool = True) -> None:
    """An existing store file is a whole SQLite database (not another file of that name, not one
    cut short by a full disk or a copy that stopped), read without writing a byte. A store that
    another process holds locked is waited for (``$MMEMB_STORE_BUSY_S``), then named as in use
    by that process: a lock is not damage. ``write``: the command will write, so a writer's lock
    (which lets readers through) is waited for too."""
    OPENED.pop(uri, None)  # the latest store this process meets is the one named later
    OPENED[uri] = (path, option)
    if not path.is_file() or path.stat().st_size == 0:  # a new store (or an empty file) is made
        return
    import sqlite3
    import time

    aside = f"move it aside (mv {path} {path}.bad) to start a new store there, or {point(option)}"
    with path.open("rb") as f:
        head = f.read(100)
    if head[:16] != b"SQLite format 3\x00":
        raise ValueError(f"{option} {uri}: {path} is not a SQLite database (it starts with "
                         f"{head[:8]!r}); {aside}")
    # The header's page size and page count (valid when its two change counters agree): a file
    # shorter than that was cut short. Then, on stores small enough to read in a blink, a check
    # of every page.
    size = int.from_bytes(head[16:18], "big")
    size = 65536 if size == 1 else size
    pages = int.from_bytes(head[28:32], "big")
    if len(head) == 100 and head[24:28] == head[92:96] and pages and \
            path.stat().st_size < size * pages:
        raise ValueError(f"{option} {uri}: {path} is cut short ({path.stat().st_size} of "
                         f"{size * pages} bytes); restore it from a backup, or {aside}")
    budget = store_busy_s()
    deadline = time.monotonic() + budget
    row: tuple | None = ("ok",)
    try:
        # SQLite's busy handler retries a locked store until the timeout: the bounded wait.
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=budget)
        try:
            if path.stat().st_size <= QUICK_CHECK_BYTES:
                row = con.execute("PRAGMA quick_check").fetchone()
            else:  # too big to check every page here; a read still meets a writer's lock
                con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            con.close()
        if write and row and row[0] == "ok":  # a writer's lock lets readers through
            con = sqlite3.connect(str(path), isolation_level=None,
                                  timeout=max(0.0, deadline - time.monotonic()))
            try:
                con.execute("BEGIN IMMEDIATE")  # takes the write lock; writes nothing
                con.execute("ROLLBACK")
            finally:
                con.close()
    except sqlite3.Error as e:
        if is_busy(e):
            raise StoreInUse(path, uri, option, budget) from None
        if "unable to open" in str(e):
            raise ValueError(f"{option} {uri}: {path} cannot be opened ({e}); check the "
                             "permissions of the file and its folder") from None
        row = (str(e),)
    if not row or row[0] != "ok":  # SQLite's own integrity check failed: damage
        raise ValueError(f"{option} {uri}: {path} is a damaged SQLite database ({row[0] if row else 'unreadable'}); "
                         f"restore it from a backup, or {aside}")


def _check_driver(uri: str, option: str) -> None:
    """A database store's driver is installed and the database takes a connection."""
    from orchestrator.tracking.database import check_database

    check_database(uri, option, fallback="sqlite:///PATH/mlflow.db")
