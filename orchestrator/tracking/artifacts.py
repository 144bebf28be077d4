"""Where a table's artifacts (each student, the report) go, said before it runs: a tracking
server keeps them where it was started to (``--artifacts-destination``); a sqlite store beside
its file; a database store where ``--artifact-location`` says, else in MLflow's default
``./mlruns`` of the folder the first table ran from, which a colleague's machine cannot read."""

from __future__ import annotations

from pathlib import Path

from orchestrator.tracking.uris import sqlite_path

DATABASES = ("postgresql", "mysql", "mssql")


def artifacts_line(uri: str, location: str | None) -> str:
    """The dry run's words on where artifacts go, with the fix where a group would lose them."""
    scheme = uri.split("://", 1)[0].split("+")[0] if "://" in uri else ""
    if scheme in ("http", "https"):
        if location:
            return "artifacts: where the server keeps them (it ignores --artifact-location)"
        return "artifacts: where the server keeps them (its --artifacts-destination)"
    if location:
        return f"artifacts of a new experiment in {location}"
    db = sqlite_path(uri)
    if db is not None:
        return f"artifacts in {(db.parent / 'mlartifacts').as_uri()}"
    if scheme in DATABASES:
        return (f"artifacts in {(Path.cwd() / 'mlruns').as_uri()} on this machine only, if this "
                "command creates the experiment (a group: pass --artifact-location "
                "s3://BUCKET/mlflow, or use a tracking server, docs/team.md)")
    return "artifacts where the store keeps them"
