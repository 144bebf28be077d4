"""MLflow bookkeeping: one parent run per table or search, one child run per (cell, seed) trial.

Nesting is explicit (``mlflow.parentRunId`` set by us, never inferred from an active-run stack:
Ray's and Optuna's integrations are known to lose it), and all writes happen in the driver
through a Tune callback, so trial processes never open the database and a sqlite store has one
writer. Resume bookkeeping reads the same runs back: a trial is done when its child run FINISHED.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.tracking.provenance import git_state

EXPERIMENT = "mmemb"
TAG = "mmemb."  # prefix of our tags


def default_tracking_uri() -> str:
    """The embedded default: a sqlite store in the working directory (absolute: trials chdir)."""
    return f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"


SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "file", "databricks",
           "databricks-uc", "uc")
"""the tracking stores MLflow 3 registers (``mlflow.tracking._tracking_service.utils``)"""
_FORMS = "sqlite:///PATH/mlflow.db, http(s)://HOST:PORT, postgresql://..., mysql://... or file:///PATH"


def check_tracking_uri(uri: str, option: str = "--tracking-uri") -> None:
    """One line naming the URI, the problem and the fix, before any store is opened or created:
    a scheme MLflow does not know, a local store whose folder is missing or read-only, a server
    that does not answer."""
    from mlflow.utils.uri import get_uri_scheme

    scheme = get_uri_scheme(uri)
    if scheme and scheme not in SCHEMES:
        raise ValueError(f"{option} {uri}: MLflow has no {scheme!r} store; use {_FORMS}")
    if scheme == "sqlite":
        if not uri.startswith("sqlite:///") or uri in ("sqlite:///", "sqlite:///:memory:"):
            raise ValueError(f"{option} {uri}: not a sqlite file (an in-memory store loses every "
                             "run when the command ends); use sqlite:///PATH/mlflow.db")
        _check_local(Path(uri.removeprefix("sqlite:///")), uri, option)
    elif scheme in ("", "file"):  # a file store: the URI names its folder
        _check_local(Path(urllib.parse.urlparse(uri).path if scheme else uri), uri, option)
    check_reachable(uri)


def _check_local(path: Path, uri: str, option: str) -> None:
    """The store file (or folder) ``path`` can be created or written where the URI says."""
    folder = path.absolute().parent
    if not folder.is_dir():
        raise ValueError(f"{option} {uri}: folder {folder} does not exist; create it "
                         f"(mkdir -p {folder}) or point {option} elsewhere")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{option} {uri}: {path if path.exists() else folder} is not writable; "
                         f"fix its permissions or point {option} at a writable folder")


def check_reachable(uri: str, timeout: float = 5.0) -> None:
    """Fail before anything starts when an http(s) tracking server does not answer."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as r:
            if r.status == 200:
                return
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        raise ConnectionError(
            f"MLflow tracking server {uri} is unreachable ({getattr(e, 'reason', e)}); start it "
            "(mlflow server ...) or drop --tracking-uri to use the local store"
        ) from None
    raise ConnectionError(f"MLflow tracking server {uri} did not answer /health with 200")


class Tracker:
    """Thin wrapper over ``MlflowClient`` with the project's run layout."""

    def __init__(self, uri: str | None = None, experiment: str = EXPERIMENT):
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        # Fail over to the local journal in seconds, not after minutes of HTTP retries.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        import mlflow
        from mlflow.tracking import MlflowClient

        self.uri = uri or default_tracking_uri()
        check_tracking_uri(self.uri)
        mlflow.set_tracking_uri(self.uri)
        self.client = MlflowClient(self.uri)
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            artifacts = None
            if self.uri.startswith("sqlite:"):  # keep artifacts beside the db, not in a trial's cwd
                artifacts = (Path(self.uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
            self.experiment_id = self.client.create_experiment(experiment, artifact_location=artifacts)
        else:
            self.experiment_id = exp.experiment_id
        # MLflow 3 opens GenAI experiments on a traces page; ours are training runs.
        self.client.set_experiment_tag(self.experiment_id, "mlflow.experimentKind",
                                       "custom_model_development")

    # --- parents ----------------------------------------------------------------------------
    def start_parent(self, name: str, kind: str, plan_id: str, tags: Mapping[str, str],
                     resume: bool) -> tuple[str, bool]:
        """A new parent run, or with ``resume`` the latest one of the same plan. -> (id, resumed)."""
        if resume:
            runs = self.client.search_runs(
                [self.experiment_id], f"tags.`{TAG}plan_id` = '{plan_id}'",
                order_by=["attributes.start_time DESC"], max_results=1,
            )
            if runs:
                self.client.set_terminated(runs[0].info.run_id, "RUNNING")
                return runs[0].info.run_id, True
        run = self.client.create_run(self.experiment_id, run_name=name, tags={
            f"{TAG}kind": kind, f"{TAG}plan_id": plan_id, **git_state(), **tags,
        })
        return run.info.run_id, False

    def end(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status)

    # --- children ---------------------------------------------------------------------------
    def children(self, parent_id: str) -> list[Any]:
        return self.client.search_runs(
            [self.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'", max_results=5000
        )

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
        if trial.get("array"):  # the array it trained in (one Ray Train run)
            tags[f"{TAG}array"] = trial["array"]
        if trial.get("group"):
            tags[f"{TAG}group"] = trial["group"]
        if trial.get("objective"):  # the method's effective settings, as the loss used them
            tags[f"{TAG}objective"] = json.dumps(trial["objective"], sort_keys=True)[:7900]
        run = self.client.create_run(self.experiment_id, run_name=trial["run_name"], tags=tags)
        params = [Param(k, str(v)[:6000]) for k, v in flat_params(trial["run"]).items()]
        for i in range(0, len(params), 100):
            self.client.log_batch(run.info.run_id, params=params[i : i + 100])
        return run.info.run_id

    def log_result(self, run_id: str, result: Mapping[str, Any]) -> None:
        """Dev curve points and loss terms at their step; final test scores once."""
        import time

        from mlflow.entities import Metric

        step = int(result.get("step", 0))
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, step) for k, v in result.items()
                   if _is_metric(k, v)]
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)
        if result.get("checkpoint_path"):
            self.client.set_tag(run_id, f"{TAG}checkpoint", str(result["checkpoint_path"]))
        if result.get("node_id"):
            self.client.set_tag(run_id, f"{TAG}node", str(result["node_id"]))

    # --- read back --------------------------------------------------------------------------
    def scores(self, parent_id: str) -> tuple[dict[str, dict[int, dict[str, float]]], dict]:
        """cell -> seed -> final metrics (``test/`` prefix dropped) of FINISHED children; and
        cell -> seed -> failure reason of the others."""
        ok: dict[str, dict[int, dict[str, float]]] = {}
        failed: dict[str, dict[int, str]] = {}
        for r in self.children(parent_id):
            t = r.data.tags
            cell, seed = t.get(f"{TAG}cell"), int(t.get(f"{TAG}seed", -1))
            if r.info.status == "FINISHED":
                m = {k.removeprefix("test/"): v for k, v in r.data.metrics.items()
                     if k.startswith("test/")}
                m["best_stsb_dev"] = r.data.metrics.get("best_stsb_dev", float("nan"))
                ok.setdefault(cell, {})[seed] = m
            else:
                failed.setdefault(cell, {})[seed] = t.get(f"{TAG}error") or r.info.status
        for cell, seeds in failed.items():  # a later success of the same trial wins
            for seed in [s for s in seeds if s in ok.get(cell, {})]:
                del seeds[seed]
        return ok, {c: s for c, s in failed.items() if s}

    def log_model_dir(self, run_id: str, folder: str | Path) -> str:
        """Upload an MLflow model folder as the run's ``model`` artifact; -> where the student
        folder inside it now lives (a local path for a local store, else an artifact URI)."""
        from trainables.mlflow_model import DATA

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
        or key.startswith(("loss/", "test/"))
    return keep and isinstance(value, int | float) and not isinstance(value, bool)


def flat_params(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(flat_params(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, list | tuple) else v
    return out
