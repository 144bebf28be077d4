"""A tracking server (``http(s)://``) answers before anything starts: ``/health``, then one real
client call; and the client's HTTP settings, so a server that stops answering fails over to the
journal in seconds."""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request

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
    http_env()
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
                f"{body(text) or 'Forbidden'}); a server started with --allowed-hosts must list "
                f"the host this command calls it by: restart it with --allowed-hosts '{host}' (or "
                "call it by a name it allows)") from None
        if "401" in text:
            raise ConnectionError(
                f"MLflow tracking server {uri} asks for credentials (401); set "
                "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
            ) from None
        raise ConnectionError(f"MLflow tracking server {uri} answers /health but refused a search "
                              f"of experiments ({text[:300]})") from None


def body(text: str) -> str:
    """The server's own words in an MLflow client error (``... Response body: '...'``)."""
    if "Response body:" not in text:
        return ""
    return text.split("Response body:", 1)[1].strip(" '\"")[:200]


def http_env() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    # Fail over to the local journal in seconds, not after minutes of HTTP retries.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    # MLflow draws a "Downloading artifacts" bar for every file it reads back (grid.json, ...):
    # noise above the command's own lines, and above its error line when one follows.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

