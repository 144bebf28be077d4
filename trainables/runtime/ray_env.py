"""The driver's side of Ray: start or join a cluster, name storage, read a remote error.

Used by whatever starts runs (``orchestrator``, ``python -m trainables.train``,
``trainables.extract``); the workers' side is ``trainables.train``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path


def storage_uri(path: str) -> str:
    """Absolute local folder, or a URI (s3://, gs://, ...) passed through untouched."""
    return path if "://" in path else str(Path(path).resolve())


def cluster_has_gpu() -> bool:
    import ray

    return ray.is_initialized() and ray.cluster_resources().get("GPU", 0) > 0


def init_ray(address: str | None = None, num_cpus: int | None = None, log_to_driver: bool = True):
    """Join a cluster (``address``) or start a light embedded Ray (docs/ecosystem-notes.md)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")
    os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
    # Tune's new console output prints its config box and a TensorBoard hint even at verbose=0;
    # the legacy reporter honours it, and our callback prints the live view.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # A failed trial is one line in the live view and in MLflow (its reason); Tune's own
    # traceback of it stays in the trial's error.txt under --storage, out of the terminal.
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
    if ray.is_initialized():
        return
    quiet_raylet()
    quiet_tune_state_errors()
    # Ray's own INFO/WARNING lines in workers (report echoes, state-API retries without a
    # dashboard) would drown the dev curve the run prints; errors still come through.
    quiet = ray.LoggingConfig(log_level="ERROR")
    from trainables.runtime import shipping

    # the user's method, grid and search files: Ray ships their folders to every worker
    ship = {"runtime_env": env} if (env := shipping.runtime_env()) else {}
    if address:
        from trainables.runtime import ray_address

        ray_address.check(address)  # nobody there: one line now, not Ray's minutes of retries
        ray.init(address=address, log_to_driver=log_to_driver, logging_config=quiet, **ship)
    else:
        ray.init(**ship,
            # "local": always a fresh embedded instance, never a cluster someone `ray start`ed here
            address="local",
            num_cpus=num_cpus or os.cpu_count(), include_dashboard=False,
            log_to_driver=log_to_driver, object_store_memory=200 * 2**20, logging_config=quiet,
            _system_config={"enable_worker_prestart": False, "prestart_worker_first_driver": False},
            _temp_dir=own_ray_temp_dir(),
        )
    sigterm_as_interrupt()


_own_temp: list[Path] = []


def own_ray_temp_dir() -> str | None:
    """The embedded Ray's temp dir, this driver's own (trainables/runtime/local_ray.py), after
    stopping in one line what a killed driver's Ray left running; None: Ray's default."""
    import atexit

    from trainables.runtime import local_ray

    try:
        local_ray.clean_orphans()
    except Exception as e:  # never a reason not to start: said, and the command goes on
        warn_once("orphans", f"could not look for Ray processes left by killed drivers ({e})")
    folder = local_ray.own_temp_dir()
    if folder is None:
        return None
    if not _own_temp:
        _own_temp.append(folder)
        atexit.register(_at_exit, folder)
    return str(folder)


def _at_exit(folder: Path) -> None:
    """Ray's own atexit shutdown was registered when ray was imported, so it would run after
    this one: shut Ray down here, then stop what it left and remove its temp dir."""
    import contextlib

    import ray

    from trainables.runtime import local_ray

    with contextlib.suppress(Exception):
        ray.shutdown()
    local_ray.forget_own_temp_dir(folder)


def sigterm_as_interrupt() -> None:
    """SIGTERM (a scheduler's timeout, ``kill``) does what Ctrl-C does: Tune stops its trials
    and the command ends its runs KILLED. ``ray.init`` installs a handler that exits at once
    (``sys.exit``), leaving every MLflow run RUNNING; this one replaces it."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame):  # the SIGINT handler of the moment: Tune's inside fit()
        current = signal.getsignal(signal.SIGINT)
        if callable(current):
            current(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


class _OneLine:
    """A logging filter: an error logged with its traceback keeps one line (the exception's)."""

    def filter(self, record) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            e = record.exc_info[1]
            record.msg = f"{record.getMessage().rstrip(': ')}: {type(e).__name__}: {e}"
            record.args, record.exc_info, record.exc_text = (), None, None
        return True


def quiet_tune_state_errors() -> None:
    """Tune logs every failed save of its experiment state with a traceback (each few seconds
    while a disk is full); one line each says the same."""
    import logging

    log = logging.getLogger("ray.tune.execution.experiment_state")
    if not any(isinstance(f, _OneLine) for f in log.filters):
        log.addFilter(_OneLine())
    # "ERROR tune.py: Trials did not complete: [trial_fn_abc12, ...]" names Tune's trials, which
    # a table's user never sees; each failed run already has its one line with the reason.
    tune_log = logging.getLogger("ray.tune.tune")
    if not any(isinstance(f, _NoIncompleteTrials) for f in tune_log.filters):
        tune_log.addFilter(_NoIncompleteTrials())


class _NoIncompleteTrials:
    """A logging filter that drops Tune's closing list of the trials that did not complete."""

    def filter(self, record) -> bool:
        return not str(record.msg).startswith("Trials did not complete")


_NOISE = ("PYTHON worker processes have been started",)
"""raylet hints about Ray's own worker pool: nothing a user of a table can act on"""


_DUMP = "[state-dump]"
"""Ray's internal state dumps (a dozen lines each, when a node is lost): for Ray's developers"""
_dump_log: list[Path] = []


def _to_dump_log(lines: list[str]) -> None:
    """Ray's state dumps go to a file beside Ray's own logs, named once on the terminal."""
    if not _dump_log:
        import tempfile

        try:
            from trainables.runtime.ray_private import worker as rw

            folder = Path(rw._global_node.get_logs_dir_path())
        except Exception:  # no node (a unit test): the temp folder
            folder = Path(tempfile.gettempdir())
        _dump_log.append(folder / "mmemb-ray-state-dumps.log")
        print(f"(Ray's internal state dumps are written to {_dump_log[0]}, not here)",
              file=sys.stderr, flush=True)
    try:
        with _dump_log[0].open("a") as f:
            f.write("".join(ln + "\n" for ln in lines))
    except OSError:
        pass  # a diagnostic for Ray's developers: never a reason to fail a table


def quiet_raylet() -> None:
    """Drop the raylet's worker-pool hints and print every other raylet message once.

    The driver prints what the raylet pushes (``(raylet) WARNING: 8 PYTHON worker processes have
    been started ...``) between the live view's lines, again and again. Where Ray's printer moved
    (another version), nothing changes.
    """
    from trainables.runtime.ray_private import worker as rw

    original = getattr(rw, "print_to_stdstream", None)
    if original is None or getattr(original, "_mmemb_quiet", False):
        return
    seen: set[str] = set()

    def printer(data, *args, **kwargs):
        if data.get("pid") == "raylet":
            dumps = [ln for ln in data.get("lines", []) if _DUMP in ln]
            if dumps:
                _to_dump_log(dumps)
            lines = [ln for ln in data.get("lines", []) if not any(n in ln for n in _NOISE)
                     and ln not in seen and _DUMP not in ln]
            seen.update(lines)
            if not lines:
                return None
            data = {**data, "lines": lines}
        return original(data, *args, **kwargs)

    printer._mmemb_quiet = True  # type: ignore[attr-defined]
    rw.print_to_stdstream = printer


def root_cause(err: BaseException) -> str:
    """The last ``SomeError: message`` line of a (remote) traceback, e.g. an OutOfMemoryError."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ": " in ln and ln.split(": ", 1)[0].rsplit(".", 1)[-1]
              .endswith(("Error", "Loss", "Exception"))]
    last = errors[-1] if errors else (lines[-1] if lines else repr(err))
    head, _, msg = last.partition(": ")
    return f"{head.rsplit('.', 1)[-1]}: {msg}"[:500] if msg else last[:500]


_warned: set[str] = set()


def warn_once(key: str, line: str) -> None:
    """One ``warning:`` line per process and key (a reaper that turned itself off says so)."""
    if key not in _warned:
        _warned.add(key)
        print(f"warning: {line}", file=sys.stderr, flush=True)


def private_state_api() -> tuple[Callable[[], list[bytes]], Callable[[str], str | None]] | None:
    """(placement-group rows, actor state by id) from Ray's private state module (``ray_private.state``), or None
    (with one warning line) where this Ray version moved it: the public state API needs the
    dashboard (``ray[default]``), which the embedded Ray does not start (docs/ecosystem-notes.md §4)."""
    try:
        from trainables.runtime.ray_private import state as private

        accessor = private.state._connect_and_get_accessor
        actors = private.actors
    except (ImportError, AttributeError) as e:
        import ray

        warn_once("private-state", f"Ray {ray.__version__} has no private state module ({e}); "
                  "placement groups of stopped or lost runs are not released automatically, so "
                  "a table may hang after a node leaves: pin ray 2.60 (pyproject.toml)")
        return None

    def rows() -> list[bytes]:
        return accessor().get_placement_group_table()

    def actor_state(actor_hex: str) -> str | None:
        return actors(actor_id=actor_hex).get("State") or None

    return rows, actor_state


# Ray Train V2 has no public accessor for these in Ray 2.60: they are read from its private
# ``ray.train.v2._internal.execution.context`` here and nowhere else, and
# tests/trainables/runtime/test_private_apis.py fails if a Ray upgrade moves them.
def train_controller():
    """The controller actor of the Ray Train run this worker belongs to."""
    from ray.train.v2._internal.execution.context import get_train_context

    return get_train_context().controller_actor


def quiet_train_reports() -> None:
    """Train V2 echoes every report at INFO through its context module's logger (named by file,
    not by a dotted name); the run prints its own progress, so only warnings are let through."""
    import logging

    import ray.train.v2._internal.execution.context as train_context

    train_context.logger.setLevel(logging.WARNING)



def lean_trainer(trainer_class: type) -> type:
    """``trainer_class`` (a Train V2 trainer) without the helper actors it starts for nothing here.

    Each actor is one more Python process per array that imports Ray and Train (about 6 CPU
    seconds each, ``bench/README.md``), started beside the run's own worker:

    - the datasets' manager, made for every run: the arrays read their data themselves and
      pass no Ray Dataset (kept when one is passed);
    - the placement-group cleaner, which asks Ray's public state API every second whether the
      controller lives: that API needs the dashboard, absent from the embedded Ray, and the
      table's driver releases the groups of dead runs itself (``orchestrator/run/placement.py``);
    - the preemption watcher, which tells the workers of a node being drained: nothing here
      reads it (a user's ``RAY_TRAIN_ENABLE_PREEMPTION_WATCHER=1`` keeps it).
    """
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import (
        PlacementGroupCleanerCallback,
    )

    class Lean(trainer_class):  # type: ignore[misc,valid-type]
        def _create_default_callbacks(self) -> list:
            dropped = (PlacementGroupCleanerCallback,) + (() if self.datasets else (DatasetsCallback,))
            return [c for c in super()._create_default_callbacks() if not isinstance(c, dropped)]

        def fit(self):  # read by the controller from this process's environment
            os.environ.setdefault(PREEMPTION_WATCHER, "0")
            return super().fit()

    Lean.__name__ = Lean.__qualname__ = trainer_class.__name__
    return Lean


PREEMPTION_WATCHER = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"
"""Train V2's switch for its preemption watcher, passed from the caller's environment to the
controller (``ray.train.v2._internal.constants``)"""
