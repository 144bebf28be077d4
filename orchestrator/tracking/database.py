"""A database store (the MLflow tracking store, the Optuna study) answers before anything starts:
its driver imports, and one connection is made with a short timeout, so a wrong password, an
unknown database or a host that does not answer is one line in seconds, not minutes of a
library's retries ending in tracebacks. Every line names the URL with its password masked."""

from __future__ import annotations

from orchestrator.tracking.uris import FORMS, masked

CONNECT_TIMEOUT_S = 5
"""how long one connection attempt may take (the driver's own ``connect_timeout``)"""
DRIVERS = {"psycopg": "'psycopg[binary]'", "psycopg2": "psycopg2-binary",
           "MySQLdb": "mysqlclient", "pymysql": "pymysql", "pyodbc": "pyodbc"}
"""module SQLAlchemy imports -> what to pip install"""


def driver_advice(url: str, module: str) -> str:
    """What to install for ``url``'s missing driver ``module``, and the URI form that takes the
    other PostgreSQL driver: SQLAlchemy 2.1 reads plain ``postgresql://`` with psycopg 3."""
    advice = f"pip install {DRIVERS.get(module, module)}"
    if module == "psycopg":
        advice += " (or, with psycopg2-binary installed, write postgresql+psycopg2://...)"
    return advice


def check_database(url: str, option: str, fallback: str) -> None:
    """``url``'s driver is installed and the database takes one connection; else one line.
    ``fallback``: the local store to use instead (``sqlite:///PATH/...``)."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    shown = masked(url)
    try:
        u = make_url(url)
        dialect = u.get_dialect()
        (getattr(dialect, "import_dbapi", None) or dialect.dbapi)()
    except ImportError as e:
        name = getattr(e, "name", None) or str(e).split()[-1].strip("'\"")
        raise ValueError(f"{option} {shown}: the Python driver for this database is not "
                         f"installed (no module {name!r}); {driver_advice(url, name)}, or use "
                         f"{fallback}") from None
    except Exception as e:  # a malformed URL, a dialect SQLAlchemy does not know
        what = url.split("://", 1)[0] if "://" in url else url
        raise ValueError(f"{option} {shown}: no driver for {what} "
                         f"({' '.join(str(e).split())[:200]}); use {fallback}, or {FORMS}") \
            from None
    backend = u.get_backend_name()
    args = {"connect_timeout": CONNECT_TIMEOUT_S} if backend in ("postgresql", "mysql") else {}
    engine = create_engine(u, poolclass=NullPool, connect_args=args)
    try:
        with engine.connect():
            pass
    except Exception as e:
        raise ValueError(f"{option} {shown}: {refusal(e, u)}") from None
    finally:
        engine.dispose()


def refusal(e: BaseException, u) -> str:
    """The database's refusal in one line, with the fix."""
    text = " ".join(str(getattr(e, "orig", None) or e).split())
    low = text.lower()
    where = f"{u.host or 'localhost'}:{u.port or ''}".rstrip(":")
    if "password authentication failed" in low or "access denied" in low:
        return (f"the database refused the password of user {u.username!r}; check it (keep it out of "
                "the URI with PGPASSWORD or ~/.pgpass for PostgreSQL)")
    if "does not exist" in low and "database" in low:
        return (f"no database {u.database!r} on {where}; create it (createdb -h {u.host} -p "
                f"{u.port or 5432} -U {u.username} {u.database}) or name one that exists")
    if "unknown database" in low:
        return f"no database {u.database!r} on {where}; create it (CREATE DATABASE {u.database})"
    if "timeout" in low or "timed out" in low:
        return (f"{where} did not answer within {CONNECT_TIMEOUT_S} s; check the host and port, "
                "and that the database server is running and reachable from here")
    if "refused" in low or "could not connect" in low or "name or service" in low or \
            "could not translate" in low:
        return (f"cannot connect to {where} ({_short(text)}); check the host and port, and that "
                "the database server is running")
    return f"the database refused a connection ({_short(text)})"


def _short(text: str) -> str:
    """The driver's message without its password and its list of every address it tried."""
    return text.split(" Multiple connection attempts")[0][:200]
