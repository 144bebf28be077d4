"""MLflow bookkeeping: one parent run per table or search, one child run per (cell, seed) trial.

Nesting is explicit (``mlflow.parentRunId`` set by us, never inferred from an active-run stack:
Ray's and Optuna's integrations are known to lose it), and all writes happen in the driver
through a Tune callback, so trial processes never open the database and a sqlite store has one
writer. Resume bookkeeping reads the same runs back: a trial is done when its child run FINISHED.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.tracking.provenance import code_version, git_state

EXPERIMENT = "mmemb"
TAG = "mmemb."  # prefix of our tags
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"


def default_tracking_uri() -> str:
    """The embedded default: a sqlite store in the working directory (absolute: trials chdir)."""
    return f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"


SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "file", "databricks",
           "databricks-uc", "uc")
"""the tracking stores MLflow 3 registers (``mlflow.tracking._tracking_service.utils``)"""
_FORMS = "sqlite:///PATH/mlflow.db, http(s)://HOST:PORT, postgresql://..., mysql://... or file:///PATH"


def check_tracking_uri(uri: str, option: str = "--tracking-uri", write: bool = True) -> None:
    """One line naming the URI, the problem and the fix, before any store is opened or created:
    a scheme MLflow does not know, a local store whose folder is missing or read-only, a store
    file that is not a whole SQLite database or that another process keeps locked, a server that
    does not answer. ``write``: the command will write to the store (``best`` only reads)."""
    from mlflow.utils.uri import get_uri_scheme

    from trainables.runtime.command_line import unexpanded_home

    scheme = get_uri_scheme(uri)
    if scheme and scheme not in SCHEMES:
        raise ValueError(f"{option} {uri}: MLflow has no {scheme!r} store; use {_FORMS}")
    if scheme == "sqlite":
        if not uri.startswith("sqlite:///") or uri in ("sqlite:///", "sqlite:///:memory:"):
            raise ValueError(f"{option} {uri}: not a sqlite file (an in-memory store loses every "
                             "run when the command ends); use sqlite:///PATH/mlflow.db")
        path = uri.removeprefix("sqlite:///")
        if path.startswith("~"):
            unexpanded_home(path, option, uri, f"sqlite:///{_home(path)}")
        _check_local(Path(path), uri, option)
        _check_sqlite_file(Path(path), uri, option, write)
    elif scheme and scheme.split("+")[0] in ("postgresql", "mysql", "mssql"):
        _check_driver(uri, option)
    elif scheme in ("", "file"):  # a file store: the URI names its folder
        path = urllib.parse.urlparse(uri).path if scheme else uri
        if path.startswith("~"):
            unexpanded_home(path, option, uri, _home(path))
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
                         f"{_elsewhere(option)}")
    if not folder.is_dir():
        raise ValueError(f"{option} {uri}: folder {folder} does not exist; create it "
                         f"(mkdir -p {folder}) or {_elsewhere(option)}")
    from trainables.runtime.command_line import writable_folder

    try:
        writable_folder(folder, option)
    except ValueError:
        writable = False
    else:
        writable = not path.exists() or os.access(path, os.W_OK)
    if not writable:
        raise ValueError(f"{option} {uri}: {path if path.exists() else folder} is not writable; "
                         f"fix its permissions or {_elsewhere(option)}")


def _home(path: str) -> str:
    try:
        return str(Path(path).expanduser())
    except RuntimeError:  # ~name of a user this machine does not know
        return "/FULL/PATH/" + path.split("/", 1)[-1]


def _elsewhere(option: str) -> str:
    """How to put the store elsewhere: the option itself, or for the default store (./mlflow.db,
    which no option named) the option that replaces it."""
    if option.startswith("--"):
        return f"point {option} elsewhere"
    return "pass --tracking-uri sqlite:///PATH/mlflow.db to put the store elsewhere"


QUICK_CHECK_BYTES = 256 * 2**20
"""stores up to this size get SQLite's page-by-page check before a command opens them"""

STORE_BUSY_ENV = "MMEMB_STORE_BUSY_S"
STORE_BUSY_S = 30.0
"""how long a command waits for a sqlite store that another process holds locked (a colleague's
long transaction, a ``sqlite3`` shell left in one) before it says so; ``$MMEMB_STORE_BUSY_S``"""
MLFLOW_BUSY_S = 20.0
"""how long MLflow's own sqlite sessions wait for a lock (its ``PRAGMA busy_timeout``)"""


def store_busy_s() -> float:
    """``$MMEMB_STORE_BUSY_S``, or :data:`STORE_BUSY_S`."""
    import math

    raw = os.environ.get(STORE_BUSY_ENV)
    if raw is None or not raw.strip():
        return STORE_BUSY_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"${STORE_BUSY_ENV}={raw!r} must be a number of seconds >= 0 (how long "
                         f"to wait for a store another process holds locked); unset it for "
                         f"{STORE_BUSY_S:g} s")
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


def _point(option: str) -> str:
    """How to name another store: the option itself, or for the default store the option that
    replaces it."""
    if option.startswith("--"):
        return f"point {option} at another file"
    return "pass --tracking-uri sqlite:///PATH/mlflow.db to use another file"


_OPENED: dict[str, tuple[Path, str]] = {}
"""uri -> (sqlite file, how the command named it), of the stores this process opened: a lock
met later (MLflow's own wait ran out) is named the same way"""


def _check_sqlite_file(path: Path, uri: str, option: str, write: bool = True) -> None:
    """An existing store file is a whole SQLite database (not another file of that name, not one
    cut short by a full disk or a copy that stopped), read without writing a byte. A store that
    another process holds locked is waited for (``$MMEMB_STORE_BUSY_S``), then named as in use
    by that process: a lock is not damage. ``write``: the command will write, so a writer's lock
    (which lets readers through) is waited for too."""
    _OPENED.pop(uri, None)  # the latest store this process meets is the one named later
    _OPENED[uri] = (path, option)
    if not path.is_file() or path.stat().st_size == 0:  # a new store (or an empty file) is made
        return
    import sqlite3
    import time

    aside = f"move it aside (mv {path} {path}.bad) to start a new store there, or {_point(option)}"
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
    if not is_busy(e) or not _OPENED:
        return None
    uri, (db, where) = next(reversed(_OPENED.items()))
    return StoreInUse(db, uri, where, MLFLOW_BUSY_S)


def _check_driver(uri: str, option: str) -> None:
    """A database store's Python driver is installed (SQLAlchemy imports it on first use)."""
    try:
        from sqlalchemy.engine import make_url

        url = make_url(uri)
        dialect = url.get_dialect()
        (getattr(dialect, "import_dbapi", None) or dialect.dbapi)()
    except ImportError as e:
        name = getattr(e, "name", None) or str(e).split()[-1].strip("'\"")
        driver = {"psycopg2": "psycopg2-binary", "psycopg": "'psycopg[binary]'", "MySQLdb": "mysqlclient", "pymysql": "pymysql",
                  "pyodbc": "pyodbc"}.get(name, name)
        raise ValueError(f"{option} {url.render_as_string(hide_password=True)}: the Python driver "
                         f"for this database is not installed (no module {name!r}); pip install "
                         f"{driver}, or use sqlite:///PATH/mlflow.db") from None
    except Exception as e:  # a malformed URL, a dialect SQLAlchemy does not know
        raise ValueError(f"{option}: {e}; use {_FORMS}") from None


UNREACHABLE_HINT = "start it (mlflow server ...) or drop --tracking-uri to use the local store"


def check_reachable(uri: str, timeout: float = 5.0, hint: str = UNREACHABLE_HINT) -> None:
    """Fail before anything starts when an http(s) tracking server does not answer, or answers
    ``/health`` but refuses the client's own calls (:func:`client_check`)."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as r:
            healthy = r.status == 200
    except urllib.error.HTTPError as e:  # something answers there, but not MLflow's /health
        raise ConnectionError(
            f"{uri} answers but is not an MLflow tracking server (HTTP {e.code} on /health); "
            "check the host and port (mlflow server prints them when it starts)") from None
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        raise ConnectionError(
            f"MLflow tracking server {uri} is unreachable ({getattr(e, 'reason', e)}); {hint}"
        ) from None
    if not healthy:
        raise ConnectionError(f"MLflow tracking server {uri} did not answer /health with 200")
    client_check(uri)


def client_check(uri: str) -> None:
    """One real client call (a search of experiments): a server can answer ``/health`` and still
    refuse every API call, e.g. one started with ``--allowed-hosts`` that does not list the
    host this command calls it by (403)."""
    _http_env()
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(uri).search_experiments(max_results=1)
    except MlflowException as e:
        host = urllib.parse.urlparse(uri).netloc
        text = " ".join(str(e).split())
        if "403" in text:
            raise ConnectionError(
                f"MLflow tracking server {uri} answers /health but refuses this client (403: "
                f"{_body(text) or 'Forbidden'}); a server started with --allowed-hosts must list "
                f"the host this command calls it by: restart it with --allowed-hosts '{host}' (or "
                "call it by a name it allows)") from None
        if "401" in text:
            raise ConnectionError(
                f"MLflow tracking server {uri} asks for credentials (401); set "
                "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
            ) from None
        raise ConnectionError(f"MLflow tracking server {uri} answers /health but refused a search "
                              f"of experiments ({text[:300]})") from None


def _body(text: str) -> str:
    """The server's own words in an MLflow client error (``... Response body: '...'``)."""
    if "Response body:" not in text:
        return ""
    return text.split("Response body:", 1)[1].strip(" '\"")[:200]


def _http_env() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    # Fail over to the local journal in seconds, not after minutes of HTTP retries.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    # MLflow draws a "Downloading artifacts" bar for every file it reads back (grid.json, ...):
    # noise above the command's own lines, and above its error line when one follows.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` store (None for any other store)."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def _file_store(uri: str) -> Path | None:
    """The folder of a file store (``file:///PATH`` or a bare path); None for any other store."""
    from mlflow.utils.uri import get_uri_scheme

    scheme = get_uri_scheme(uri)
    if scheme == "file":
        return Path(urllib.parse.urlparse(uri).path)
    return Path(uri) if not scheme else None


@contextlib.contextmanager
def schema_lock(db: Path | None):
    """Hold a lock beside a sqlite store while its schema and experiment are created."""
    if db is None:
        yield
        return
    from trainables.runtime.filelock import file_lock

    with file_lock(db.with_name(f".{db.name}.lock")):
        yield


STARTED: list[str] = []
"""parent runs this process created or reopened: an interrupt before any has nothing for
``--resume`` to continue (``orchestrator.cli.guarded``)"""


class Tracker:
    """Thin wrapper over ``MlflowClient`` with the project's run layout.

    ``create=False`` (the commands that read a table: report, best, ui_links, sync): the store and
    its experiment must already exist; nothing is created (no ``mlflow.db`` appears where a wrong
    ``--tracking-uri`` pointed) and opening it writes nothing.
    """

    def __init__(self, uri: str | None = None, experiment: str = EXPERIMENT, create: bool = True,
                 write: bool = True):
        _http_env()
        import logging

        import mlflow

        # A new sqlite store announces its tables at INFO; the command says where the store is.
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
        self.uri = uri or default_tracking_uri()
        where = "--tracking-uri" if uri else "the default tracking store"
        check_tracking_uri(self.uri, where, write=write or create)
        db = sqlite_path(self.uri)
        if not create:
            folder = db if db is not None else _file_store(self.uri)
            if folder is not None and not folder.exists():
                raise ValueError(
                    f"no MLflow store at {folder} ({where} {self.uri}); pass the --tracking-uri "
                    "the table ran with (by default mlflow.db in the folder it ran in)")
        mlflow.set_tracking_uri(self.uri)
        try:
            self._open(experiment, create, db)
        except Exception as e:  # locked between the check and here: MLflow waited and gave up
            if db is None or not is_busy(e):
                raise
            raise StoreInUse(db, self.uri, where, MLFLOW_BUSY_S) from None

    def _open(self, experiment: str, create: bool, db: Path | None) -> None:
        from mlflow.tracking import MlflowClient

        # Two commands starting on a fresh sqlite store would both create its schema (alembic,
        # when the client first opens it) and its experiment, and the second would fail half-way:
        # one at a time.
        with schema_lock(db) if create else contextlib.nullcontext():
            self.client = MlflowClient(self.uri)
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None and not create:
                raise ValueError(f"the MLflow store {self.uri} holds no {experiment!r} experiment "
                                 "(no table or search ran there); pass the --tracking-uri the "
                                 "table ran with")
            if exp is None:
                artifacts = None
                if db is not None:  # keep artifacts beside the db, not in a trial's cwd
                    artifacts = (db.parent / "mlartifacts").as_uri()
                self.experiment_id = self.client.create_experiment(experiment,
                                                                   artifact_location=artifacts)
            else:
                self.experiment_id = exp.experiment_id
            # MLflow 3 opens GenAI experiments on a traces page; ours are training runs.
            if create and (exp is None or exp.tags.get(KIND_TAG) != KIND):
                self.client.set_experiment_tag(self.experiment_id, KIND_TAG, KIND)

    def run(self, run_id: str) -> Any:
        """The run ``run_id``, or one line naming the store that has no such run."""
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_run(run_id)
        except MlflowException as e:
            if getattr(e, "error_code", "") != "RESOURCE_DOES_NOT_EXIST" and \
                    "not found" not in str(e).lower():
                if getattr(e, "error_code", "") == "INVALID_PARAMETER_VALUE":
                    raise ValueError(f"--run {run_id!r} is not an MLflow run id (32 hex "
                                     "characters); pass the parent run id that "
                                     "orchestrator.ablate (or search) printed") from None
                raise
        raise ValueError(f"no run {run_id} in {self.uri}; pass a parent run id that "
                         "orchestrator.ablate (or search) printed, with the --tracking-uri it used")

    def parent_run(self, run_id: str) -> Any:
        """The table's (or search's) parent run ``run_id``, or one line saying what it is not."""
        r = self.run(run_id)
        if r.info.experiment_id != self.experiment_id or f"{TAG}kind" not in r.data.tags:
            parent = r.data.tags.get("mlflow.parentRunId")
            what = f"a child run (its parent is {parent})" if parent else "not an mmemb table"
            raise ValueError(f"run {run_id} is {what}; pass the parent run id printed by "
                             "orchestrator.ablate (or search)")
        return r

    # --- parents ----------------------------------------------------------------------------
    def start_parent(self, name: str, kind: str, plan_id: str, tags: Mapping[str, str],
                     reopen: str | None = None, summary: Mapping[str, Any] | None = None) -> str:
        """A new parent run, or ``reopen`` (a parent of the same plan, found by
        :meth:`find_parent`) set RUNNING again. ``summary`` (``plan_summary``) is stored on a
        new parent as ``plan.json`` so a later ``--resume`` can say how its plan differs."""
        if reopen is not None:
            STARTED.append(reopen)
            self.client.set_terminated(reopen, "RUNNING")
            self.client.set_tag(reopen, f"{TAG}error", "")
            for k, v in tags.items():  # the driver now running it
                self.client.set_tag(reopen, k, v)
            return reopen
        run = self.client.create_run(self.experiment_id, run_name=name, tags={
            f"{TAG}kind": kind, f"{TAG}plan_id": plan_id, **git_state(),
            f"{TAG}code_version": code_version(), **tags,
        })
        STARTED.append(run.info.run_id)
        if summary is not None:
            self.client.log_text(run.info.run_id, json.dumps(summary, indent=1), "plan.json")
        return run.info.run_id

    def find_parent(self, plan_id: str) -> Any | None:
        """The latest parent run of this plan, or None."""
        runs = self.client.search_runs(
            [self.experiment_id], f"tags.`{TAG}plan_id` = '{plan_id}'",
            order_by=["attributes.start_time DESC"], max_results=1)
        return runs[0] if runs else None

    def latest_parent(self, kind: str, tag: str, name: str) -> Any | None:
        """The latest parent of the same grid or search (``tag`` = mmemb.grid / mmemb.space)."""
        runs = self.client.search_runs(
            [self.experiment_id], f"tags.`{TAG}kind` = '{kind}' and tags.`{tag}` = '{name}'",
            order_by=["attributes.start_time DESC"], max_results=1)
        return runs[0] if runs else None

    def parent_summary(self, run: Any) -> dict[str, Any]:
        """A parent's ``plan.json``; for a parent made before it existed, what its children
        and ``grid.json`` say (cells, seeds, each run's config hash)."""
        rid = run.info.run_id
        with contextlib.suppress(Exception):
            return json.loads(self.load_artifact_text(rid, "plan.json"))
        spec: dict[str, Any] = {}
        with contextlib.suppress(Exception):
            spec = json.loads(self.load_artifact_text(rid, "grid.json"))
        kids = [c for c in self.children(rid) if f"{TAG}trial" in c.data.tags]
        typed = run.data.tags.get(f"{TAG}profile", "default")
        return {"profile": None if typed == "default" else Path(typed).stem,
                "profile_arg": typed,
                "cells": spec.get("cells") or list(dict.fromkeys(
                    c.data.tags.get(f"{TAG}cell", "") for c in kids)),
                "seeds": spec.get("seeds") or sorted({int(c.data.tags.get(f"{TAG}seed", 0))
                                                      for c in kids}),
                "settings": {},
                "runs": {c.data.tags[f"{TAG}trial"]: c.data.tags.get(f"{TAG}config_hash", "")
                         for c in kids}}

    def parent_to_extend(self, kind: str, grid: str, plan_id: str,
                         members: Mapping[str, str]) -> str | None:
        """For ``--resume`` of a plan that has no parent of its own: the latest parent of the same
        kind and grid whose every child is a run of this plan with the same config hash (one run
        with ``--cells``, fewer ``--seeds`` or fewer calibration runs). Extending it reuses its
        finished runs. ``members``: trial key -> config hash of the plan's runs. Reads only: the
        session reopens it under this plan's id."""
        if self.client.search_runs([self.experiment_id], f"tags.`{TAG}plan_id` = '{plan_id}'",
                                   max_results=1):
            return None  # start_parent resumes that one
        runs = self.client.search_runs(
            [self.experiment_id], f"tags.`{TAG}kind` = '{kind}' and tags.`{TAG}grid` = '{grid}'",
            order_by=["attributes.start_time DESC"], max_results=20)
        for run in runs:
            kids = [(k.data.tags.get(f"{TAG}trial"), k.data.tags.get(f"{TAG}config_hash"))
                    for k in self.children(run.info.run_id)]
            if kids and all(key in members and members[key] == h for key, h in kids):
                return run.info.run_id
        return None

    def end(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status)

    def clear_tag(self, run_id: str, key: str) -> None:
        """Remove a tag that no longer holds (a report error once the report is stored)."""
        if key in self.client.get_run(run_id).data.tags:
            self.client.delete_tag(run_id, key)

    # --- children ---------------------------------------------------------------------------
    def children(self, parent_id: str) -> list[Any]:
        return self.client.search_runs(
            [self.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'", max_results=5000
        )

    def all_finished(self, parent_id: str | None, keys: list[str]) -> bool:
        """Every run of ``keys`` FINISHED under ``parent_id`` (a --resume with nothing left to
        train); False for no parent or no keys (a search plans its runs as it goes)."""
        return bool(parent_id) and bool(keys) and set(keys) <= set(self.finished_runs(parent_id))

    def finished_runs(self, parent_id: str) -> dict[str, str]:
        """trial key -> child run id, for children that FINISHED (resume skips these)."""
        return {r.data.tags[f"{TAG}trial"]: r.info.run_id for r in self.children(parent_id)
                if r.info.status == "FINISHED" and f"{TAG}trial" in r.data.tags}

    def unfinished_runs(self, parent_id: str) -> dict[str, str]:
        """trial key -> run id of children left RUNNING/FAILED/KILLED (reused on resume)."""
        return {r.data.tags[f"{TAG}trial"]: r.info.run_id for r in self.children(parent_id)
                if r.info.status != "FINISHED" and f"{TAG}trial" in r.data.tags}

    def member_results(self, parent_id: str) -> dict[str, dict[str, Any]]:
        """trial key -> {"status", "metrics" (latest values), "stopped", "error"} of every child."""
        out = {}
        for r in self.children(parent_id):
            t = r.data.tags
            if f"{TAG}trial" in t:
                out[t[f"{TAG}trial"]] = {"status": r.info.status, "metrics": dict(r.data.metrics),
                                        "stopped": f"{TAG}stopped" in t,
                                        "error": t.get(f"{TAG}error") or None}
        return out

    def reopen_child(self, run_id: str) -> str:
        self.client.update_run(run_id, status="RUNNING")
        self.client.set_tag(run_id, f"{TAG}error", "")
        return run_id

    def start_child(self, parent_id: str, trial: Mapping[str, Any]) -> str:
        from mlflow.entities import Param

        tags = {
            "mlflow.parentRunId": parent_id, f"{TAG}trial": trial["key"],
            f"{TAG}grid": trial["grid"], f"{TAG}cell": trial["cell"],
            f"{TAG}seed": str(trial["seed"]), f"{TAG}config_hash": trial["config_hash"],
            **git_state(),
        }
        if trial.get("cell_label"):  # what the runs view groups by (views.py)
            tags[f"{TAG}cell_label"] = trial["cell_label"]
        if trial.get("array"):  # the array it trained in (one Ray Train run)
            tags[f"{TAG}array"] = trial["array"]
        if trial.get("group"):
            tags[f"{TAG}group"] = trial["group"]
        if trial.get("backend"):  # stacked, or looped (an encoder StackedEncoder cannot express)
            tags[f"{TAG}backend"] = trial["backend"]
        if trial.get("backend_note"):  # why a looped member trained slower
            tags[f"{TAG}backend_note"] = trial["backend_note"][:5000]
        if trial.get("objective"):  # the method's effective settings, as the loss used them
            tags[f"{TAG}objective"] = json.dumps(trial["objective"], sort_keys=True)[:7900]
        if "batched_reason" in trial:  # its method's heads and loss: one vmapped computation?
            why = trial.get("batched_reason")
            tags[f"{TAG}batched"] = "false" if why else "true"
            if why:
                tags[f"{TAG}batched_reason"] = why[:5000]
                tags[f"{TAG}event.one_by_one"] = f"method {trial['run']['objective']['method']}: {why}"[:5000]
        if trial.get("unread"):  # settings of its config its method does not read: no params
            tags[f"{TAG}unread"] = ", ".join(trial["unread"])[:5000]
        if trial.get("ignored"):  # ... of which someone set: an event
            tags[f"{TAG}event.ignored"] = trial["ignored"][:5000]
        run = self.client.create_run(self.experiment_id, run_name=trial["run_name"], tags=tags)
        params = [Param(k, str(v)[:6000]) for k, v in flat_params(trial["run"]).items()]
        for i in range(0, len(params), 100):
            self.client.log_batch(run.info.run_id, params=params[i : i + 100])
        return run.info.run_id

    def log_result(self, run_id: str, result: Mapping[str, Any], at_ms: int | None = None) -> None:
        """Dev curve points and loss terms at their step; final test scores once. ``at_ms``:
        when it happened (a journal's replay), so logging it again adds no metric row."""
        import time

        from mlflow.entities import Metric

        step = int(result.get("step", 0))
        now = int(time.time() * 1000) if at_ms is None else int(at_ms)
        # 'loss/<term>@<step>': the term's mean over the steps up to that one (the array's
        # finer history); where a report has them, its mean since the last report is left out
        at = {k: (k.split("@")[0], int(k.split("@")[1])) for k in result if "@" in k
              and k.split("@")[1].isdigit()}
        finer = {name for name, _ in at.values()}
        metrics = [Metric(at[k][0], float(v), now, at[k][1]) if k in at else
                   Metric(k, float(v), now, step) for k, v in result.items()
                   if _is_metric(at[k][0] if k in at else k, v) and k not in finer]
        # The dev score first: MLflow's compare page plots the first metric a run logged
        metrics.sort(key=lambda m: m.key not in ("stsb_dev", "best_stsb_dev"))
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)
        if result.get("checkpoint_path"):
            self.client.set_tag(run_id, f"{TAG}checkpoint", str(result["checkpoint_path"]))
        if result.get("node_id"):
            self.client.set_tag(run_id, f"{TAG}node", str(result["node_id"]))

    # --- read back --------------------------------------------------------------------------
    def scores(self, parent_id: str) -> tuple[dict[str, dict[int, dict[str, float]]], dict]:
        """cell -> seed -> final metrics (``test/`` prefix dropped, ``transfer/`` kept) of FINISHED
        children; and cell -> seed -> failure reason of the others."""
        ok: dict[str, dict[int, dict[str, float]]] = {}
        failed: dict[str, dict[int, str]] = {}
        for r in self.children(parent_id):
            t = r.data.tags
            cell, seed = t.get(f"{TAG}cell"), int(t.get(f"{TAG}seed", -1))
            if r.info.status == "FINISHED":
                m = {k.removeprefix("test/"): v for k, v in r.data.metrics.items()
                     if k.startswith(("test/", "transfer/"))}
                m["best_stsb_dev"] = r.data.metrics.get("best_stsb_dev", float("nan"))
                ok.setdefault(cell, {})[seed] = m
            else:
                failed.setdefault(cell, {})[seed] = t.get(f"{TAG}error") or (
                    "still RUNNING: its table is training, or its driver is gone (--resume "
                    "continues it)" if r.info.status == "RUNNING" else r.info.status)
        for cell, seeds in failed.items():  # a later success of the same trial wins
            for seed in [s for s in seeds if s in ok.get(cell, {})]:
                del seeds[seed]
        return ok, {c: s for c, s in failed.items() if s}

    def log_model_dir(self, run_id: str, folder: str | Path) -> str:
        """Upload an MLflow model folder as the run's ``model`` artifact; -> where the student
        folder inside it now lives (a local path for a local store, else an artifact URI)."""
        from trainables.models.mlflow_export import DATA

        self.client.log_artifacts(run_id, str(folder), "model")
        uri = self.client.get_run(run_id).info.artifact_uri.rstrip("/") + f"/model/{DATA}"
        self.client.set_tag(run_id, f"{TAG}model", f"runs:/{run_id}/model")
        self.client.set_tag(run_id, f"{TAG}checkpoint", uri.removeprefix("file://"))
        return uri

    def log_artifact_text(self, run_id: str, name: str, text: str) -> None:
        self.client.log_text(run_id, text, name)

    def log_artifact_file(self, run_id: str, path: str | Path) -> None:
        self.client.log_artifact(run_id, str(path))

    def load_artifact_text(self, run_id: str, name: str) -> str:
        return Path(self.client.download_artifacts(run_id, name)).read_text()


def _is_metric(key: str, value: Any) -> bool:
    keep = key in ("stsb_dev", "best_stsb_dev", "best_step", "lr", "epoch", "final", "steps") \
        or key.startswith(("loss/", "test/", "transfer/"))
    return keep and isinstance(value, int | float) and not isinstance(value, bool)


def flat_params(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(flat_params(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, list | tuple) else v
    return out
