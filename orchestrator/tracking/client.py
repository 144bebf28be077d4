"""MLflow bookkeeping: one parent run per table or search, one child run per (cell, seed) trial.

Nesting is explicit (``mlflow.parentRunId`` set by us, never inferred from an active-run stack:
Ray's and Optuna's integrations are known to lose it), and all writes happen in the driver
through a Tune callback, so trial processes never open the database and a sqlite store has one
writer. Resume bookkeeping reads the same runs back: a trial is done when its child run FINISHED.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.tracking.provenance import code_version, git_state
from orchestrator.tracking.server import check_reachable as check_reachable
from orchestrator.tracking.server import http_env
from orchestrator.tracking.store_checks import check_tracking_uri as check_tracking_uri
from orchestrator.tracking.store_lock import MLFLOW_BUSY_S, StoreInUse, is_busy, schema_lock
from orchestrator.tracking.store_lock import busy_line as busy_line
from orchestrator.tracking.uris import default_tracking_uri, file_store
from orchestrator.tracking.uris import sqlite_path as sqlite_path

# The names above imported "as" themselves stay importable from here (journal.py and sync.py,
# edited elsewhere, import them from this module); new code imports them from their own module.

EXPERIMENT = "mmemb"
TAG = "mmemb."  # prefix of our tags
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"


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
                 write: bool = True, artifact_location: str | None = None):
        http_env()
        import mlflow

        from orchestrator.tracking.quiet import quiet_mlflow

        quiet_mlflow()  # the command says where the store is, and what a lock or outage means
        self.uri = uri or default_tracking_uri()
        where = "--tracking-uri" if uri else "the default tracking store"
        check_tracking_uri(self.uri, where, write=write or create)
        db = sqlite_path(self.uri)
        if not create:
            folder = db if db is not None else file_store(self.uri)
            if folder is not None and not folder.exists():
                raise ValueError(
                    f"no MLflow store at {folder} ({where} {self.uri}); pass the --tracking-uri "
                    "the table ran with (by default mlflow.db in the folder it ran in)")
        mlflow.set_tracking_uri(self.uri)
        try:
            self._open(experiment, create, db, artifact_location)
        except Exception as e:  # locked between the check and here: MLflow waited and gave up
            if db is None or not is_busy(e):
                raise
            raise StoreInUse(db, self.uri, where, MLFLOW_BUSY_S) from None

    def _open(self, experiment: str, create: bool, db: Path | None,
              artifact_location: str | None = None) -> None:
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
                artifacts = artifact_location
                if artifacts is None and db is not None:  # keep artifacts beside the db, not in a trial's cwd
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
        if trial.get("array"):  # the array it trained in (one Tune trial)
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

    def log_model_dir(self, run_id: str, folder: str | Path, move: bool = False) -> str:
        """Upload an MLflow model folder as the run's ``model`` artifact; -> where the student
        folder inside it now lives (a local path for a local store, else an artifact URI).

        ``move``: the caller drops ``folder`` afterwards. A store whose artifacts are a local
        folder then takes it by a rename, which is what MLflow's copy would leave there, without
        copying the weights (55 MB a demo member, 440 MB a BERT-base one)."""
        from trainables.models.mlflow_export import DATA

        root = self.client.get_run(run_id).info.artifact_uri.rstrip("/")
        local = local_artifacts(root)
        if move and local is not None and not (local / "model").exists():
            local.mkdir(parents=True, exist_ok=True)
            shutil.move(str(folder), local / "model")  # a rename on one filesystem
        else:
            self.client.log_artifacts(run_id, str(folder), "model")
        uri = root + f"/model/{DATA}"
        self.client.set_tag(run_id, f"{TAG}model", f"runs:/{run_id}/model")
        self.client.set_tag(run_id, f"{TAG}checkpoint", uri.removeprefix("file://"))
        return uri

    def log_artifact_text(self, run_id: str, name: str, text: str) -> None:
        self.client.log_text(run_id, text, name)

    def log_artifact_file(self, run_id: str, path: str | Path) -> None:
        self.client.log_artifact(run_id, str(path))

    def load_artifact_text(self, run_id: str, name: str) -> str:
        return Path(self.client.download_artifacts(run_id, name)).read_text()


def local_artifacts(uri: str) -> Path | None:
    """The folder behind a ``file:`` (or plain path) artifact URI; None for any other store."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    return Path(uri) if not parsed.scheme and uri.startswith("/") else None


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
