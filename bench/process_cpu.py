"""CPU seconds of a command's whole process tree, by kind of process (Linux ``/proc``).

Why: on a shared machine the wall time of a table is what the other users leave it, while the
CPU seconds each process spends (its imports, Ray's daemons, the training itself) barely move
with the load. ``bench/table_timing.py`` samples the tree of the command it runs and prints, per
kind (the driver, Ray's daemons, Tune's trial actors, Ray Train's controllers and workers, the
report queues, idle Ray workers), how many processes there were and their CPU seconds.

How: a thread reads ``/proc/<pid>/stat`` every ``interval_s`` for the root and every process
whose parent it has seen (so a worker the raylet starts is followed even after the raylet is
gone), keeping each process's latest CPU time and its most telling title (a Ray worker renames
itself ``ray::<Actor>.<method>`` when it takes work). A process that ends between two samples
loses at most one interval of CPU; one that lives less than an interval may be missed.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

KINDS = (
    ("Tune trial actors", ("ray::ImplicitFunc", "ray::_Inner", "ray::trial_fn")),
    ("Train controllers", ("ray::TrainController",)),
    ("Train workers", ("ray::RayTrainWorker",)),
    ("report queues", ("ray::_QueueActor",)),
    ("Ray daemons", ("gcs_server", "raylet", "dashboard", "log_monitor", "runtime_env",
                     "monitor.py", "agent")),
    ("idle Ray workers", ("ray::IDLE", "default_worker.py")),
)
"""(kind, title fragments), first match wins; the command itself is "driver" """


def kind_of(title: str, is_root: bool) -> str:
    if is_root:
        return "driver"
    for kind, parts in KINDS:
        if any(p in title for p in parts):
            return kind
    return "other"


@dataclass
class _Proc:
    cpu_s: float = 0.0
    title: str = ""


@dataclass
class ProcessCpu:
    """Samples ``root``'s process tree until :meth:`stop`; :meth:`by_kind` sums it."""

    root: int
    interval_s: float = 0.5
    procs: dict[int, _Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="process-cpu", daemon=True)

    def start(self) -> ProcessCpu:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval_s):
                return

    def sample(self) -> None:
        """One pass over /proc: follow new children, update every known process's CPU time."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            # the command name is in parentheses and may hold spaces: split after the last ')'
            rest = stat[stat.rfind(")") + 2:].split()
            ppid, utime, stime = int(rest[1]), int(rest[11]), int(rest[12])
            if pid != self.root and pid not in self.procs and ppid not in self.procs:
                continue
            p = self.procs.setdefault(pid, _Proc())
            p.cpu_s = max(p.cpu_s, (utime + stime) / _TICK)
            try:
                title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            # keep the title of the work a Ray worker took, not the IDLE it returns to
            if title and (not p.title or "ray::IDLE" not in title):
                p.title = title

    def by_kind(self) -> dict[str, tuple[int, float]]:
        """kind -> (processes, CPU seconds), largest first."""
        out: dict[str, list[float]] = {}
        for pid, p in self.procs.items():
            k = kind_of(p.title, pid == self.root)
            n, s = out.get(k, [0, 0.0])
            out[k] = [n + 1, s + p.cpu_s]
        return {k: (int(n), s) for k, (n, s) in sorted(out.items(), key=lambda kv: -kv[1][1])}
