"""No trial result lost when MLflow goes away mid-table: writes fall back to a local journal.

The Tune callback writes through a :class:`Journal`. While the tracking server answers, writes
go straight to it. From the first failed write on, every write is appended to a JSON-lines
journal beside the Ray results instead, and the table ends by printing the command that
replays the journal once the server is back:

    python -m orchestrator.sync runs/mlflow-journal-<plan>.jsonl --tracking-uri URI

Runs started while offline get a placeholder handle (``pending:<trial key>``) that the replay
maps to a real child run, reusing one left unfinished for the same trial, so replaying never
duplicates a run.

The journal's folder can fail too (a full disk holds the store, the checkpoints and the journal
alike): the journal then moves, with what it holds, to the first writable fallback folder
(``$MMEMB_JOURNAL_DIR``, ``~/.local/state/mmemb/journals``, the system temporary folder) and says
so; when none is writable it says how many results it could not keep.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.tracking.client import Tracker

PENDING = "pending:"
FALLBACK_ENV = "MMEMB_JOURNAL_DIR"


def fallback_dirs() -> list[Path]:
    """Where a journal goes when its own folder cannot be written, in order."""
    out = [Path(os.environ[FALLBACK_ENV])] if os.environ.get(FALLBACK_ENV) else []
    return [*out, Path.home() / ".local" / "state" / "mmemb" / "journals",
            Path(tempfile.gettempdir()) / "mmemb-journals"]


class Journal:
    def __init__(self, tracker: Tracker, path: Path, parent: str | None = None,
                 fallbacks: Sequence[Path] | None = None):
        self.tracker, self.path, self.parent = tracker, path, parent
        self.fallbacks = list(fallback_dirs() if fallbacks is None else fallbacks)
        self.offline = False
        self.kept = 0
        self.unwritten: list[str] = []
        """entries no folder could take (kept in memory, written as soon as a folder can)"""
        self.moved_from: Path | None = None
        self.failures: list[str] = []
        """why each write to MLflow or to a journal folder failed (the full-disk diagnosis)"""
        self.refused_files: list[str] = []
        """why the store refused to keep files (its artifact folder not writable) while it
        still answered: those writes wait in the journal, the others go on"""

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
        except PermissionError as e:  # the store answers; its artifact folder refuses files
            why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            if not self.refused_files:
                print(f"warning: MLflow cannot store files ({why[:200]}); the store still "
                      f"answers, so runs go on; the files wait in {self.path} for "
                      "orchestrator.sync once the folder is writable", file=sys.stderr, flush=True)
            self.refused_files.append(why)
            return None
        except Exception as e:  # any tracking failure: keep the write, never lose the result
            from orchestrator.tracking.client import busy_line

            self.offline = True
            why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            busy = busy_line(e)  # a sqlite store another process keeps locked: say which
            self.failures.append(why)
            print(f"warning: MLflow write failed ({busy or why[:200]}); keeping results in "
                  f"{self.path}", file=sys.stderr, flush=True)
            return None

    def _keep(self, entry: dict) -> None:
        if not self.kept and not self.unwritten and self.parent:  # names the table, for sync
            self.unwritten.append(json.dumps({"op": "parent", "parent": self.parent}) + "\n")
        self.unwritten.append(json.dumps(entry) + "\n")
        while self.unwritten:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a") as f:
                    f.write("".join(self.unwritten))
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                if not self._move(e):
                    return
                continue
            self.kept += len(self.unwritten)
            self.unwritten = []

    def _move(self, error: OSError) -> bool:
        """The journal's folder failed: carry what it holds to the next fallback folder."""
        why = f"{self.path.parent}: {error.strerror or error}"
        self.failures.append(why)
        try:
            held = self.path.read_text() if self.path.is_file() else ""
        except OSError:
            held = ""
        held = held[: held.rfind("\n") + 1]  # a line cut by the failed write is dropped
        while self.fallbacks:
            folder = self.fallbacks.pop(0)
            target = folder / self.path.name
            try:
                folder.mkdir(parents=True, exist_ok=True)
                with target.open("a") as f:
                    f.write(held)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError:
                continue
            print(f"warning: cannot write the journal in {why}; it is now {target}",
                  file=sys.stderr, flush=True)
            with contextlib.suppress(OSError):  # its entries moved; frees the full disk a bit
                self.path.unlink(missing_ok=True)
            self.moved_from = self.moved_from or self.path
            self.path = target
            return True
        print(f"error: cannot keep {len(self.unwritten)} result(s) in a journal: {why}, and no "
              f"fallback folder is writable (set {FALLBACK_ENV}); free space, then --resume "
              "retrains the runs they belong to", file=sys.stderr, flush=True)
        return False

    def upload_command(self) -> str:
        return f"python -m orchestrator.sync {self.path} --tracking-uri {self.tracker.uri}"


FIELDS = {"parent": ("parent",), "start_child": ("parent", "plan"),
          "log_result": ("handle", "result"), "log_model": ("handle", "folder"),
          "set_tag": ("handle", "key", "value"), "end": ("handle", "status")}
"""each journal operation and the fields it needs"""


def entries(journal: Path, say=None) -> list[dict]:
    """A journal's entries, each checked. A last line cut short (the writer was killed, or the
    disk filled, mid-line) is left out, saying so; any other line that is not a journal entry is
    one line naming the file, the line and the fix."""
    lines = [(i, ln) for i, ln in enumerate(journal.read_text(errors="replace").splitlines(), 1)
             if ln.strip()]
    out: list[dict] = []
    for pos, (i, line) in enumerate(lines):
        try:
            e = json.loads(line)
        except ValueError as err:
            if pos == len(lines) - 1:
                (say or _say)(f"note: journal {journal}: its last line ({i}) was cut short "
                              f"(the command writing it stopped mid-line); the {len(out)} "
                              "entries before it are uploaded, that one is lost")
                break
            raise ValueError(f"journal {journal} line {i} is not JSON ({err}); the file is damaged "
                             "in the middle, so nothing was uploaded: restore it, or cut that "
                             "line out to upload the rest") from None
        need = FIELDS.get(e.get("op")) if isinstance(e, dict) else None
        if need is None or any(k not in e for k in need) or \
                (e["op"] == "start_child" and not isinstance(e["plan"], dict)):
            raise ValueError(f"journal {journal} line {i} is not a journal entry (got "
                             f"{line[:80]!r}); nothing was uploaded. Pass the "
                             "mlflow-journal-*.jsonl file the table printed")
        out.append(e)
    return out


def _say(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def parents(journal: Path, tracker: Tracker | None = None, quiet: bool = False) -> list[str]:
    """The parent runs a journal's entries belong to (named in it, or asked of the store)."""
    out: list[str] = []
    handles: set[str] = set()
    for e in entries(journal, say=(lambda _line: None) if quiet else None):
        if e["op"] in ("parent", "start_child") and e["parent"] not in out:
            out.append(e["parent"])
        elif e.get("handle") and not e["handle"].startswith(PENDING):
            handles.add(e["handle"])
    if tracker is not None and not out:
        for h in sorted(handles):
            p = tracker.run(h).data.tags.get("mlflow.parentRunId") or h
            if p not in out:
                out.append(p)
    return out


def replay(journal: Path, tracker: Tracker) -> int:
    """Apply a journal to MLflow in order; returns the number of entries applied."""
    handles: dict[str, str] = {}
    todo = entries(journal, say=lambda _line: None)  # parents() has said what was cut
    for e in todo:
        if e["op"] == "parent":
            continue
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
    return len(todo)
