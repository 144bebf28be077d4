"""The tracking store's URI forms: the default store, the schemes MLflow 3 knows, the local
file behind a ``sqlite:///`` or file store, and the form a URI takes on the console (its password
masked)."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path


def default_tracking_uri() -> str:
    """The embedded default: a sqlite store in the working directory (absolute: trials chdir)."""
    return f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"


SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "file", "databricks",
           "databricks-uc", "uc")
"""the tracking stores MLflow 3 registers (``mlflow.tracking._tracking_service.utils``)"""
FORMS = "sqlite:///PATH/mlflow.db, http(s)://HOST:PORT, postgresql://..., mysql://... or file:///PATH"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` store (None for any other store)."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def file_store(uri: str) -> Path | None:
    """The folder of a file store (``file:///PATH`` or a bare path); None for any other store."""
    from mlflow.utils.uri import get_uri_scheme

    scheme = get_uri_scheme(uri)
    if scheme == "file":
        return Path(urllib.parse.urlparse(uri).path)
    return Path(uri) if not scheme else None


def home_path(path: str) -> str:
    """``path`` with ``~`` expanded, for the line that shows the full path to type."""
    try:
        return str(Path(path).expanduser())
    except RuntimeError:  # ~name of a user this machine does not know
        return "/FULL/PATH/" + path.split("/", 1)[-1]


def masked(uri: str) -> str:
    """``uri`` as it may be printed or stored in MLflow: a password in it becomes ``***``
    (``postgresql://user:***@host/db``); a URI with none is returned unchanged."""
    try:
        parts = urllib.parse.urlsplit(uri)
    except ValueError:
        return uri
    if parts.password is None:
        return uri
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def masked_args(argv: list[str]) -> list[str]:
    """A command line as it may be printed or stored: each URI argument (``--opt URI`` or
    ``--opt=URI``) with its password masked."""
    out = []
    for a in argv:
        opt, eq, value = a.partition("=") if a.startswith("--") else ("", "", a)
        out.append(f"{opt}{eq}{masked(value)}" if eq else masked(a))
    return out


_SECRET = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)([^@\s/]+)(@)", re.I)


def masked_text(text: str) -> str:
    """Every ``scheme://user:password@`` in a line (a command it prints) with ``***``."""
    return _SECRET.sub(r"\1***\3", text)
