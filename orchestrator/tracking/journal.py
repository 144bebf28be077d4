"""No trial result lost when MLflow goes away mid-table: writes fall back to a local journal.

The Tune callback writes through a :class:`Journal`. While the tracking server answers, writes
go straight to it. From the first failed write on, every write is appended to a JSON-lines
journal beside the Ray results instead, and the table ends by printing the command that
replays the journal once the server is back:

    python -m orchestrator.sync runs/mlflow-journal-<plan>.jsonl --tracking-uri URI

Runs started while offline get a placeholder handle (``pending:<trial key>``) that the replay
maps to a real child run, reusing one left unfinished for the same trial, so replaying never
duplicates a run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.tracking.client import Tracker

PENDING = "pending:"


class Journal:
    def __init__(self, tracker: Tracker, path: Path):
        self.tracker, self.path = tracker, path
        self.offline = False
        self.kept = 0

    # --- writes -----------------------------------------------------------------------------
    def start_child(self, parent_id: str, plan: Mapping[str, Any],
                    reuse: str | None = None) -> str:
        def do() -> str:
            return (self.tracker.reopen_child(reuse) if reuse
                    else self.tracker.start_child(parent_id, plan))

        got = self._try(do)
        if got is not None:
            return got
        self._keep({"op": "start_child", "parent": parent_id, "plan": dict(plan),
                    "reuse": reuse})
        return PENDING + plan["key"]

    def log_result(self, handle: str, result: Mapping[str, Any]) -> None:
        slim = {k: v for k, v in result.items() if isinstance(v, int | float | str)}
        self._write(handle, "log_result", lambda: self.tracker.log_result(handle, slim),
                    {"result": slim})

    def set_tag(self, handle: str, key: str, value: str) -> None:
        self._write(handle, "set_tag", lambda: self.tracker.client.set_tag(handle, key, value),
                    {"key": key, "value": value})

    def log_model(self, handle: str, folder: str) -> bool:
        """Upload a member's MLflow model folder; False when it had to wait in the journal."""
        done = not handle.startswith(PENDING) and \
            self._try(lambda: self.tracker.log_model_dir(handle, folder)) is not None
        if not done:
            self._keep({"op": "log_model", "handle": handle, "folder": folder})
        return done

    def end(self, handle: str, status: str) -> None:
        self._write(handle, "end", lambda: self.tracker.end(handle, status), {"status": status})

    # --- internals --------------------------------------------------------------------------
    def _write(self, handle: str, op: str, call, payload: dict) -> None:
        if handle.startswith(PENDING) or self._try(call) is None:
            self._keep({"op": op, "handle": handle, **payload})

    def _try(self, call):
        if self.offline:
            return None
        try:
            out = call()
            return True if out is None else out
        except Exception as e:  # any tracking failure: keep the write, never lose the result
            self.offline = True
            print(f"warning: MLflow write failed ({type(e).__name__}: {str(e)[:200]}); "
                  f"keeping results in {self.path}", file=sys.stderr, flush=True)
            return None

    def _keep(self, entry: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
        self.kept += 1

    def upload_command(self) -> str:
        return f"python -m orchestrator.sync {self.path} --tracking-uri {self.tracker.uri}"


def replay(journal: Path, tracker: Tracker) -> int:
    """Apply a journal to MLflow in order; returns the number of entries applied."""
    handles: dict[str, str] = {}
    entries = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    for e in entries:
        if e["op"] == "start_child":
            plan = e["plan"]
            old = e.get("reuse") or tracker.unfinished_runs(e["parent"]).get(plan["key"])
            run = tracker.reopen_child(old) if old else tracker.start_child(e["parent"], plan)
            handles[PENDING + plan["key"]] = run
            continue
        run = handles.get(e["handle"], e["handle"])
        if run.startswith(PENDING):
            raise ValueError(f"journal {journal}: {e['op']} for {run} before its run started")
        if e["op"] == "log_result":
            tracker.log_result(run, e["result"])
        elif e["op"] == "log_model":
            tracker.log_model_dir(run, e["folder"])
        elif e["op"] == "set_tag":
            tracker.client.set_tag(run, e["key"], e["value"])
        elif e["op"] == "end":
            tracker.end(run, e["status"])
    return len(entries)
