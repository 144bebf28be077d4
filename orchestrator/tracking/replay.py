"""Apply journal entries to MLflow exactly once, however often the same journal is synced.

Every entry a :class:`~orchestrator.tracking.journal.Journal` writes has an identity,
``"<writer>:<seq>"``: the journal object that wrote it (one per table run) and its place in that
writer's order. Replaying an entry records its place on the table's parent run, in the tag
``mmemb.journal.<writer>``: the entries of one writer are applied in order, so the highest place
applied says which are in the store. A second ``orchestrator.sync`` of the same journal (or of
its ``.uploaded`` copy) finds every place recorded and applies nothing; one cut short applies only
what was left. Entries that are applied again anyway (the process died between an entry and its
mark) change nothing: a result keeps the time it was logged at, so MLflow keeps its metric rows
once (the same key, step, time and value), and tags, ends and model uploads write the same values.

Journals written before entries had identities get one from their file: the hash of those
entries and each one's place among them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.tracking.client import TAG, Tracker

PENDING = "pending:"
MARK = f"{TAG}journal."
"""tag prefix on a parent run: ``mmemb.journal.<writer>`` = the last place of that writer applied"""


def identify(items: Sequence[dict]) -> list[dict]:
    """Give entries without an ``id`` (journals from before identities) one from their file:
    the hash of all of them, and each one's place."""
    old = json.dumps([e for e in items if "id" not in e], sort_keys=True)
    legacy = "legacy" + hashlib.sha256(old.encode()).hexdigest()[:12]
    return [e if "id" in e else {**e, "id": f"{legacy}:{i}"} for i, e in enumerate(items, 1)]


def split_id(entry_id: str) -> tuple[str, int]:
    writer, _, seq = str(entry_id).rpartition(":")
    return writer, int(seq)


@contextlib.contextmanager
def quiet_mlflow() -> Iterator[None]:
    """MLflow logs a store's failure as an ERROR block with its tracebacks before raising it;
    the project says what happened in one line of its own, so that block stays off the console."""
    names = ("mlflow", "mlflow.store.db.utils", "mlflow.store.tracking.sqlalchemy_store",
             "mlflow.utils.rest_utils", "urllib3.connectionpool")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def cause(e: BaseException, uri: str) -> str:
    """What an MLflow failure means for the journal, in a few words: the store locked by whom,
    or not answering, and why."""
    from orchestrator.tracking.client import busy_line, is_busy

    if is_busy(e):
        from trainables.runtime.filelock import process_line

        busy = busy_line(e)
        who = [process_line(pid) for pid, _ in busy.holders[:2]] if busy else []
        return (f"the store {uri} was locked by " + " and ".join(who) if who else
                f"the store {uri} was locked by another process")
    why = " ".join(f"{type(e).__name__}: {e}".split())[:200]
    return f"MLflow at {uri} did not answer ({why})"


@dataclass(frozen=True)
class Outcome:
    applied: int
    skipped: int
    """entries the store had already (a sync before this one, or the table's own retries)"""


class Replayer:
    """Applies entries in order, skipping those the store records as applied, recording each one
    it applies. It keeps what it learns (the runs that pending handles became, each writer's
    mark) so a journal drained in pieces while its table runs resumes where it stopped."""

    def __init__(self, tracker: Tracker, parent: str | None = None):
        self.tracker = tracker
        self.handles: dict[str, str] = {}
        """``pending:<trial key>`` -> the run it became"""
        self._lazy: dict[str, tuple[str, str]] = {}
        """pending handle -> (parent, trial key), for a start_child applied by an earlier sync"""
        self._parent: dict[str, str] = {}
        """writer -> the run its marks live on (the table's parent)"""
        self._marks: dict[str, int] = {}
        self._default_parent = parent

    def resolve(self, handle: str) -> str:
        """The run a handle names now (a pending handle once its run exists), else the handle."""
        if handle in self.handles:
            return self.handles[handle]
        if handle in self._lazy:
            parent, key = self._lazy[handle]
            runs = [r for r in self.tracker.children(parent)
                    if r.data.tags.get(f"{TAG}trial") == key]
            if runs:
                run = max(runs, key=lambda r: r.info.start_time or 0).info.run_id
                self.handles[handle] = run
                return run
        return handle

    def learn(self, items: Sequence[dict]) -> None:
        """Which run each writer's marks live on: its header, or the parent of its first entry."""
        for e in items:
            writer, _ = split_id(e["id"])
            if writer in self._parent:
                continue
            if e["op"] in ("parent", "start_child"):
                self._parent[writer] = e["parent"]
            elif self._default_parent:
                self._parent[writer] = self._default_parent
            elif not str(e.get("handle", PENDING)).startswith(PENDING):
                run = self.tracker.run(e["handle"])
                tags = run.data.tags if run is not None else {}
                self._parent[writer] = tags.get("mlflow.parentRunId") or e["handle"]

    def applied(self, entry: dict) -> bool:
        """The store already holds this entry."""
        writer, seq = split_id(entry["id"])
        return seq <= self._mark(writer)

    def _mark(self, writer: str) -> int:
        if writer not in self._marks:
            parent = self._parent.get(writer)
            run = self.tracker.run(parent) if parent else None
            raw = run.data.tags.get(MARK + writer, "0") if run is not None else "0"
            self._marks[writer] = int(raw) if raw.isdigit() else 0
        return self._marks[writer]

    def apply(self, entry: dict, source: str) -> bool:
        """Apply one entry unless the store has it; True when it was applied now."""
        with quiet_mlflow():
            if entry["op"] == "start_child" and self.applied(entry):
                key = entry["plan"]["key"]
                self._lazy[PENDING + key] = (entry["parent"], key)
            if self.applied(entry):
                return False
            self.do(entry, source)
            writer, seq = split_id(entry["id"])
            parent = self._parent.get(writer)
            if parent:
                self.tracker.client.set_tag(parent, MARK + writer, str(seq))
            self._marks[writer] = seq
        return True

    def do(self, e: dict, source: str) -> None:
        """Apply one entry (no mark: a live write, or :meth:`apply`'s)."""
        t = self.tracker
        if e["op"] == "parent":
            return
        if e["op"] == "start_child":
            plan = e["plan"]
            old = e.get("reuse") or t.unfinished_runs(e["parent"]).get(plan["key"])
            self.handles[PENDING + plan["key"]] = (t.reopen_child(old) if old
                                                   else t.start_child(e["parent"], plan))
            return
        run = self.resolve(e["handle"])
        if run.startswith(PENDING):
            raise ValueError(f"journal {source}: {e['op']} for {run} before its run started")
        if e["op"] == "log_result":
            t.log_result(run, e["result"], at_ms=e.get("at"))
        elif e["op"] == "log_model":
            t.log_model_dir(run, e["folder"], move=bool(e.get("move")))
        elif e["op"] == "set_tag":
            t.client.set_tag(run, e["key"], e["value"])
        elif e["op"] == "end":
            t.end(run, e["status"])


def upload(items: Sequence[dict], tracker: Tracker, source: str,
           parent: str | None = None) -> Outcome:
    """Apply a journal's entries (each with an ``id``) to the store once; see the module."""
    r = Replayer(tracker, parent)
    r.learn(items)
    done = sum(r.apply(e, source) for e in items)
    return Outcome(applied=done, skipped=len(items) - done)


def marks(tracker: Tracker, parent: str) -> Mapping[str, Any]:
    """The journal marks a parent run holds: writer -> last place applied."""
    tags = tracker.client.get_run(parent).data.tags
    return {k.removeprefix(MARK): v for k, v in tags.items() if k.startswith(MARK)}
