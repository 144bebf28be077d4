"""The group's servers for tests/team: PostgreSQL, the S3 server and ``mlflow server`` on them,
started once for the session and stopped by PID; and the same tiny table run on SQLite, the
reference every server-backed table must equal. Where PostgreSQL is not installed every test
here skips with one line naming the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.team.servers import KEYS, NO_POSTGRES, PG_BIN, S3, MlflowServer, Postgres
from trainables.testing import write_tiny_profile

ROOT = Path(__file__).resolve().parents[2]
GRID = str(ROOT / "tests" / "orchestrator" / "grid_tiny.py")
GRID_B = str(Path(__file__).with_name("grid_other.py"))
TRIALS = ["mcse/seed-0", "mcse/seed-1", "kdmcse/seed-0", "kdmcse/seed-1"]


@dataclass(frozen=True)
class Group:
    """What a group shares: the servers, and a tiny profile."""

    pg: Postgres
    s3: S3
    mlflow: MlflowServer
    space: Path

    def env(self, keys: bool = True, **extra: str) -> dict[str, str]:
        """A user's environment: the S3 keys where Ray's --storage s3:// needs them (``keys``;
        a client of the tracking server needs none), no endpoint unless ``extra`` names it."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "MLFLOW_S3_")) and k != "MLFLOW_TRACKING_URI"}
        return {**env, **(KEYS if keys else {}), "PYTHONPATH": str(ROOT), **extra}

    def run(self, module: str, *args: str, cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 1800) -> subprocess.CompletedProcess:
        cwd.mkdir(parents=True, exist_ok=True)
        return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd,
                              env=env or self.env(), capture_output=True, text=True,
                              timeout=timeout)

    def table(self, cwd: Path, tracking: str, storage: str, *extra: str, grid: str = GRID,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return self.run("orchestrator.ablate", "--grid", grid, "--profile",
                        str(self.space / "tiny.yaml"), "--array-size", "2",
                        "--tracking-uri", tracking, "--storage", storage, *extra,
                        cwd=cwd, env=env)

    def popen_table(self, cwd: Path, tracking: str, storage: str, label: str, *extra: str,
                    grid: str = GRID, env: dict[str, str] | None = None) -> subprocess.Popen:
        cwd.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrator.ablate", "--grid", grid, "--profile",
             str(self.space / "tiny.yaml"), "--array-size", "2", "--tracking-uri", tracking,
             "--storage", storage, *extra], cwd=cwd, env=env or self.env(),
            stdout=(cwd / f"{label}.out").open("w"), stderr=(cwd / f"{label}.err").open("w"),
            start_new_session=True)


@pytest.fixture(scope="session")
def group(tmp_path_factory, request):
    if not (PG_BIN / "initdb").exists():
        pytest.skip(NO_POSTGRES)
    tiny_bert = request.getfixturevalue("tiny_bert")
    root = tmp_path_factory.mktemp("group")
    space = root / "space"
    space.mkdir()
    write_tiny_profile(space, tiny_bert)
    pg = s3 = server = None
    # PostgreSQL runs as its own user, who cannot enter pytest's private (0700) folders
    pg_root = Path(tempfile.mkdtemp(prefix="mmemb-team-pg-"))
    try:
        pg = Postgres(pg_root / "pg").init()
        pg.create("mlflow", "direct", "study", "faults")
        s3 = S3(root / "s3").start("artifacts", "runs")
        server = MlflowServer(root / "server", pg.uri("mlflow"), "s3://artifacts/mlflow",
                              s3.endpoint).start()
        yield Group(pg, s3, server, space)
    finally:
        for stop in (server and server.stop, s3 and s3.stop, pg and pg.stop):
            if stop:
                stop()
        shutil.rmtree(pg_root, ignore_errors=True)


@pytest.fixture(scope="session")
def reference(group, tmp_path_factory) -> dict[str, dict[str, float]]:
    """The tiny table on SQLite with local checkpoints: trial key -> final numbers."""
    from tests.team.reading import numbers, table_of

    d = tmp_path_factory.mktemp("sqlite-reference")
    done = group.table(d, f"sqlite:///{d / 'mlflow.db'}", str(d / "runs"))
    assert done.returncode == 0, done.stderr[-3000:]
    _, _, kids = table_of(f"sqlite:///{d / 'mlflow.db'}", done.stdout)
    return {k: numbers(c) for k, c in kids.items()}
