"""A group's servers on loopback, each started for the tests and stopped by its PID: a PostgreSQL
cluster of its own (Debian's ``postgresql`` package, ``initdb``/``pg_ctl`` as an unprivileged
user), an S3-compatible server (moto's, a dev dependency) with its buckets, and ``mlflow server``
on PostgreSQL with artifacts in that bucket, as ``cluster.yaml`` starts it. Faults stop and
start them (PostgreSQL stopped then started, S3 unreachable, MLflow killed and restarted)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
NO_POSTGRES = (f"PostgreSQL 15 is not installed (no {PG_BIN}/initdb); "
               "apt-get install -y postgresql to run the team server tests")
USER, PASSWORD = "mmemb", "s3cret-pw"
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1"}
"""moto takes any keys; the clients of an ``--artifacts-destination`` server need none"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _stop(proc: subprocess.Popen | None) -> None:
    """Stop a server this module started, by its PID (its own session: its children too)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


@dataclass
class Postgres:
    """A PostgreSQL cluster in ``root`` on 127.0.0.1:``port``, password auth for ``mmemb``."""

    root: Path
    port: int = field(default_factory=free_port)

    @property
    def data(self) -> Path:
        return self.root / "pgdata"

    def _as_owner(self, *argv: str) -> list[str]:
        """``initdb`` and ``postgres`` refuse root: run them as the package's own user."""
        if os.geteuid() != 0:
            return list(argv)
        return ["runuser", "-u", "postgres", "--", *argv]

    def init(self) -> Postgres:
        self.root.mkdir(parents=True, exist_ok=True)
        pw = self.root / "pw"
        pw.write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            for path in (self.root.parent, self.root, pw):
                shutil.chown(path, "postgres")
        subprocess.run(self._as_owner(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", USER,
                                      f"--pwfile={pw}", "--auth=scram-sha-256", "-E", "UTF8"),
                       check=True, capture_output=True, text=True)
        return self.start()

    def start(self) -> Postgres:
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root}"
        subprocess.run(self._as_owner(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", opts,
                                      "-l", str(self.root / "log"), "-w", "-t", "300", "start"),
                       check=True, capture_output=True, text=True)
        wait_for(lambda: answers(self.port), f"PostgreSQL on port {self.port}")
        return self

    def stop(self) -> None:
        """Fast shutdown (clients are cut off), as a restart of the database host does."""
        subprocess.run(self._as_owner(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast",
                                      "-w", "-t", "300", "stop"), capture_output=True, text=True)

    def uri(self, db: str, password: str = PASSWORD, driver: str = "") -> str:
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        return f"{scheme}://{USER}:{password}@127.0.0.1:{self.port}/{db}"

    def create(self, *dbs: str) -> None:
        import psycopg

        with psycopg.connect(self.uri("postgres"), autocommit=True) as con:
            for db in dbs:
                con.execute(f'CREATE DATABASE "{db}"')


@dataclass
class S3:
    """moto's S3-compatible server on 127.0.0.1:``port`` (state in memory: a restart empties it,
    so a fault makes it unreachable by pausing it, not by restarting it)."""

    root: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *buckets: str) -> S3:
        self.root.mkdir(parents=True, exist_ok=True)
        log = (self.root / "s3.log").open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.team.s3_server", "127.0.0.1", str(self.port)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: answers(self.port), f"the S3 server on port {self.port}")
        import boto3

        s3 = boto3.client("s3", endpoint_url=self.endpoint, **_boto_keys())
        for b in buckets:
            s3.create_bucket(Bucket=b)
        return self

    def pause(self) -> None:
        """Unreachable: the process stops answering (SIGSTOP) but keeps the bucket's state."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        import boto3

        s3 = boto3.client("s3", endpoint_url=self.endpoint, **_boto_keys())
        keys: list[str] = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return keys

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)
        _stop(self.proc)


def _boto_keys() -> dict[str, str]:
    return {"aws_access_key_id": KEYS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": KEYS["AWS_SECRET_ACCESS_KEY"],
            "region_name": KEYS["AWS_DEFAULT_REGION"]}


@dataclass
class MlflowServer:
    """``mlflow server --backend-store-uri postgresql://... --artifacts-destination s3://...``,
    as cluster.yaml starts it: the server holds the S3 keys, its clients none."""

    root: Path
    backend: str
    artifacts: str
    s3_endpoint: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MlflowServer:
        self.root.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **KEYS, "MLFLOW_S3_ENDPOINT_URL": self.s3_endpoint,
               "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        log = (self.root / "mlflow-server.log").open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend,
             "--artifacts-destination", self.artifacts, "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self._healthy, f"mlflow server on port {self.port} (log: {log.name})")
        return self

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"mlflow server exited {self.proc.returncode}: "
                                 + (self.root / "mlflow-server.log").read_text()[-3000:])
        try:
            with urllib.request.urlopen(self.uri + "/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        """Killed outright (SIGKILL), as an out-of-memory kill or a crashed host does."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        _stop(self.proc)
