"""A database store is checked by connecting, in one line with its password masked; file stores
are refused where MLflow 3 would refuse them; MLflow's own ERROR block stays off the console
(issues 48 and 49). No server is needed: the refusals here are of places nothing answers."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.tracking.artifacts import artifacts_line
from orchestrator.tracking.database import driver_advice
from orchestrator.tracking.store_checks import check_tracking_uri
from orchestrator.tracking.uris import masked, masked_args, masked_text

ROOT = Path(__file__).resolve().parents[3]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_passwords_are_masked_in_uris_arguments_and_lines():
    assert masked("postgresql://mmemb:pw@db:5432/mlflow") == "postgresql://mmemb:***@db:5432/mlflow"
    assert masked("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"
    assert masked_args(["--tracking-uri", "postgresql://u:pw@h/d", "--study-storage=mysql://u:pw@h/s"]) \
        == ["--tracking-uri", "postgresql://u:***@h/d", "--study-storage=mysql://u:***@h/s"]
    line = "python -m orchestrator.sync j.jsonl --tracking-uri postgresql+psycopg://u:pw@h:1/d"
    assert masked_text(line).endswith("postgresql+psycopg://u:***@h:1/d")


def test_an_unreachable_database_is_one_masked_line_in_seconds():
    uri = f"postgresql://mmemb:hunter2@127.0.0.1:{_closed_port()}/mlflow"
    t0 = time.monotonic()
    with pytest.raises(ValueError) as e:
        check_tracking_uri(uri)
    line = str(e.value)
    assert time.monotonic() - t0 < 60  # one attempt, no retry storm (seconds when not loaded)
    assert "\n" not in line and "hunter2" not in line and "mmemb:***@" in line, line
    assert "cannot connect to 127.0.0.1" in line and "database server is running" in line


def test_the_study_check_connects_too_and_masks_the_password():
    from orchestrator.run.rounds import check_study

    uri = f"postgresql://mmemb:hunter2@127.0.0.1:{_closed_port()}/study"
    with pytest.raises(ValueError) as e:
        check_study(uri)
    assert "hunter2" not in str(e.value) and str(e.value).startswith("--study-storage postgresql://mmemb:***@")


def test_driver_advice_names_psycopg3_for_plain_postgresql():
    advice = driver_advice("postgresql://u@h/d", "psycopg")
    assert "pip install 'psycopg[binary]'" in advice and "postgresql+psycopg2://" in advice
    assert driver_advice("mysql://u@h/d", "MySQLdb") == "pip install mysqlclient"


def test_a_missing_driver_is_refused_with_what_to_install():
    pytest.importorskip("sqlalchemy")
    try:
        import pg8000  # noqa: F401
        pytest.skip("pg8000 is installed here: no missing driver to refuse")
    except ImportError:
        pass
    with pytest.raises(ValueError, match=r"no module 'pg8000'\); pip install pg8000"):
        check_tracking_uri("postgresql+pg8000://u:pw@127.0.0.1:5432/d")


@pytest.mark.parametrize("uri", ["file:///tmp/mmemb-no-such/mlruns", "/tmp/mmemb-no-such/mlruns"])
def test_a_file_store_is_refused_by_the_check_as_by_the_run(uri, monkeypatch):
    """The dry run's check and the run's Tracker say the same line (MLflow 3 refuses to open
    file stores); MLflow's own switch lets one through."""
    from orchestrator.tracking.client import Tracker

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ValueError) as checked:
        check_tracking_uri(uri)
    with pytest.raises(ValueError) as opened:
        Tracker(uri)
    assert str(checked.value) == str(opened.value)
    assert "use sqlite:///PATH/mlflow.db" in str(checked.value)


def test_mlflow_s_error_block_for_a_caught_database_error_stays_off_the_console(tmp_path):
    """In a process that opened a store, MLflow's ERROR for a database error it re-raises (a
    locked or vanished store: the project says it in one line) does not reach stderr; its other
    errors do. A subprocess: MLflow's handler writes to the stderr it found at import."""
    script = (
        "import logging\n"
        "from orchestrator.tracking.client import Tracker\n"
        f"Tracker('sqlite:///{tmp_path / 'mlflow.db'}')\n"
        "log = logging.getLogger('mlflow.store.db.utils')\n"
        "try:\n"
        "    raise RuntimeError('database is locked')\n"
        "except RuntimeError as e:\n"
        "    log.exception('SQLAlchemy database error. The following exception is caught.\\n%s', e)\n"
        "log.error('another error MLflow has to say')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "another error MLflow has to say" in done.stderr  # MLflow's errors do show
    assert "SQLAlchemy database error" not in done.stderr and "Traceback" not in done.stderr


def test_the_dry_run_says_where_artifacts_go():
    line = artifacts_line("postgresql://u@h/d", None)
    assert "on this machine only" in line and "--artifact-location s3://BUCKET/mlflow" in line
    assert artifacts_line("postgresql://u@h/d", "s3://b/mlflow") == \
        "artifacts of a new experiment in s3://b/mlflow"
    assert "--artifacts-destination" in artifacts_line("http://h:5000", None)
