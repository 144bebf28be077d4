"""No trial result lost when MLflow goes away mid-table: writes fall back to a local journal.

The Tune callback writes through a :class:`Journal`. While the tracking server answers, writes
go straight to it. From the first failed write on, every write is appended to a JSON-lines
journal beside the Ray results instead, and the table ends by printing the command that
replays the journal once the server is back:

    python -m orchestrator.sync runs/mlflow-journal-<plan>.jsonl --tracking-uri URI

Runs started while offline get a placeholder handle (``pending:<trial key>``) that the replay
maps to a real child run, reusing one left unfinished for the same trial, so replaying never
duplicates a run. Every entry has an identity and the store records the entries applied
(:mod:`orchestrator.tracking.replay`), so syncing a journal twice uploads nothing the second time.

While the table runs, the journal asks the store again with back-off (``$MMEMB_JOURNAL_RETRY_S``
first, doubling up to :data:`RETRY_MAX_S`) and uploads what it holds as soon as the store
answers: a lock released or a server back mid-table leaves nothing to do by hand. The table's end
tries once more (:meth:`Journal.finish`) before it says what is left.

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
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.tracking.client import Tracker
from orchestrator.tracking.replay import PENDING, Replayer, cause, identify, quiet_mlflow, upload

FALLBACK_ENV = "MMEMB_JOURNAL_DIR"
RETRY_ENV = "MMEMB_JOURNAL_RETRY_S"
RETRY_S = 10.0
"""the first wait before the journal asks a store that failed again; each failure doubles it"""
RETRY_MAX_S = 300.0

__all__ = ["PENDING", "Journal", "entries", "parents", "retire", "upload"]


def retry_s() -> float:
    """``$MMEMB_JOURNAL_RETRY_S``, or :data:`RETRY_S`."""
    from orchestrator.tracking.store_lock import seconds_from_env

    return seconds_from_env(RETRY_ENV, RETRY_S, "how long the journal waits before it asks a "
                            "store that failed again")


def fallback_dirs() -> list[Path]:
    """Where a journal goes when its own folder cannot be written, in order."""
    out = [Path(os.environ[FALLBACK_ENV])] if os.environ.get(FALLBACK_ENV) else []
    return [*out, Path.home() / ".local" / "state" / "mmemb" / "journals",
            Path(tempfile.gettempdir()) / "mmemb-journals"]


def retire(path: Path) -> Path:
    """A journal whose entries are all in the store becomes ``<name>.uploaded``, the record of
    what was uploaded (added to the record an earlier table of the same plan left)."""
    done = path.with_suffix(".uploaded")
    if done.exists():
        with done.open("a") as f:
            f.write(path.read_text())
        path.unlink()
    else:
        path.rename(done)
    return done


class Journal:
    def __init__(self, tracker: Tracker, path: Path, parent: str | None = None,
                 fallbacks: Sequence[Path] | None = None, retry: float | None = None,
                 clock=time.monotonic):
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
        self.writer = uuid.uuid4().hex[:16]
        """this journal's part of its entries' identities (orchestrator.tracking.replay)"""
        self.seq = 0
        self.held: list[dict] = []
        """entries kept and not yet in the store, in order"""
        self.replayer = Replayer(tracker, parent)
        self.cause = ""
        """what the store did last time it failed: locked by whom, or not answering"""
        self.uploaded_late = 0
        """entries this journal uploaded itself once the store answered again"""
        self.retired: Path | None = None
        """where the journal went once all of it was uploaded (``.uploaded``)"""
        self.first_retry = retry_s() if retry is None else retry
        self.backoff = self.first_retry
        self.clock = clock
        self.retry_at = clock() + self.first_retry

    # --- writes -----------------------------------------------------------------------------
    def start_child(self, parent_id: str, plan: Mapping[str, Any],
                    reuse: str | None = None) -> str:
        def do() -> str:
            return (self.tracker.reopen_child(reuse) if reuse
                    else self.tracker.start_child(parent_id, plan))

        got = None if self.offline else self._try(do)
        if got is not None:
            return got
        self._keep({"op": "start_child", "parent": parent_id, "plan": dict(plan),
                    "reuse": reuse})
        self._retry()
        return self.replayer.handles.get(PENDING + plan["key"], PENDING + plan["key"])

    def log_result(self, handle: str, result: Mapping[str, Any]) -> None:
        slim = {k: v for k, v in result.items() if isinstance(v, int | float | str)}
        # the time it happened travels with it: a replay logs the same metric rows, never twice
        self.write("log_result", handle, {"result": slim, "at": int(time.time() * 1000)})

    def set_tag(self, handle: str, key: str, value: str) -> None:
        self.write("set_tag", handle, {"key": key, "value": value})

    def log_model(self, handle: str, folder: str, move: bool = False) -> bool:
        """Upload a member's MLflow model folder; False when it had to wait in the journal.
        ``move``: the folder is not needed after (a local store takes it whole, no copy)."""
        return self.write("log_model", handle, {"folder": folder, **({"move": True} if move else {})})

    def end(self, handle: str, status: str) -> None:
        self.write("end", handle, {"status": status})

    def write(self, op: str, handle: str, payload: Mapping[str, Any]) -> bool:
        """Write one entry to the store, or keep it; True when the store took it now."""
        handle = self.replayer.handles.get(handle, handle)  # a pending run uploaded since
        entry = {"op": op, "handle": handle, **payload}
        if not self.offline and not handle.startswith(PENDING) and \
                self._try(lambda: self.replayer.do(entry, str(self.path))) is not None:
            return True
        self._keep(entry)
        self._retry()
        return False

    # --- the store again --------------------------------------------------------------------
    def _retry(self) -> None:
        """Offline, once the back-off has passed: upload what is kept; back online if it all went."""
        if not self.offline or self.clock() < self.retry_at:
            return
        if self._drain() is None:
            print(f"note: MLflow answers again; what was kept in {self.path} meanwhile is "
                  f"uploaded ({self.uploaded_late} entries so far)", file=sys.stderr, flush=True)

    def _drain(self) -> BaseException | None:
        """Upload the kept entries in order; the error that stopped it, or None when all went."""
        try:
            with quiet_mlflow():
                self.replayer.learn(self.held)
            while self.held:
                self.replayer.apply(self.held[0], str(self.path))
                self.held.pop(0)
                self.uploaded_late += 1
        except Exception as e:  # still down (or locked): ask again later, less often
            self.cause = cause(e, self.tracker.uri)
            self.failures.append(" ".join(f"{type(e).__name__}: {e}".split())[:300])
            self.retry_at = self.clock() + self.backoff
            self.backoff = min(2 * self.backoff, RETRY_MAX_S)
            if isinstance(e, PermissionError):
                self.refused_files.append(str(e)[:300])
            return e
        self.offline = False
        self.backoff = self.first_retry
        return None

    def finish(self, wait_s: float) -> bool:
        """The table's end: upload what is kept, asking the store with back-off for up to
        ``wait_s`` seconds; True when nothing is left to upload (the journal is then retired to
        ``.uploaded``)."""
        deadline, pause = self.clock() + wait_s, 1.0
        while self.held and (err := self._drain()) is not None:
            if isinstance(err, PermissionError):
                return False  # the store answers but keeps no files: waiting changes nothing
            if self.clock() + pause > deadline:
                return False
            time.sleep(pause)
            pause *= 2
        self.refused_files = []
        if self.path.is_file():
            with contextlib.suppress(OSError):
                self.retired = retire(self.path)
        return True

    # --- internals --------------------------------------------------------------------------
    def _try(self, call):
        if self.offline:
            return None
        try:
            with quiet_mlflow():
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
            self.offline = True
            self.cause = cause(e, self.tracker.uri)
            self.failures.append(" ".join(f"{type(e).__name__}: {e}".split())[:300])
            self.retry_at = self.clock() + self.backoff
            print(f"warning: MLflow write failed: {self.cause}; keeping results in {self.path}, "
                  f"uploaded as soon as the store answers (asked again in {self.backoff:g} s, "
                  "then less often)", file=sys.stderr, flush=True)
            return None

    def _keep(self, entry: dict) -> None:
        if not self.kept and not self.unwritten and self.parent:  # names the table, for sync
            self._hold({"op": "parent", "parent": self.parent})
        self._hold(entry)
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

    def _hold(self, entry: dict) -> None:
        self.seq += 1
        entry = {"id": f"{self.writer}:{self.seq}", **entry}
        self.held.append(entry)
        self.unwritten.append(json.dumps(entry) + "\n")

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
        if need is None or any(k not in e for k in need) or not _identity(e) or \
                (e["op"] == "start_child" and not isinstance(e["plan"], dict)):
            raise ValueError(f"journal {journal} line {i} is not a journal entry (got "
                             f"{line[:80]!r}); nothing was uploaded. Pass the "
                             "mlflow-journal-*.jsonl file the table printed")
        out.append(e)
    return identify(out)


def _identity(e: dict) -> bool:
    """An entry's ``id`` (where it has one) is ``<writer>:<place>``."""
    if "id" not in e:
        return True
    writer, _, seq = str(e["id"]).rpartition(":")
    return bool(writer) and seq.isdigit()


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
