"""The embedded Ray's start beside the pre-start checks (bench/README.md, ``table_timing.py``).

Why: Ray's start (its GCS and raylet coming up, the driver connecting) is other processes'
work and the driver's waiting, and the slow pre-start checks (each method's heads and loss
tried at the run's sizes, the data's checks) keep one core busy in the driver: on a laptop
of two cores the two fit side by side, and a table's first seconds stop being the sum of both.

What stays: every check still runs before anything a user sees starts (no MLflow run, no
Tune trial, no ``runs/`` folder): a refused table stops the Ray it started before it says its
one line (:func:`stop_unclaimed`), as a command run in-process (a test) sees. Only the embedded Ray of a fresh run starts early:
a cluster (``--address``) is joined where it was, and ``--resume`` (which may have nothing left
to train) and ``--queue`` (which may wait for another driver) start Ray as before.
"""

from __future__ import annotations

import threading

from orchestrator.run.options import Options

_started: list[threading.Thread] = []
_errors: list[BaseException] = []
_claimed: list[bool] = []


def start_beside_checks(opts: Options) -> bool:
    """Start the embedded Ray in a thread; False where this run starts it later (see above)."""
    if opts.address or opts.resume or opts.queue or _started:
        return False

    def target() -> None:
        from trainables.runtime.ray_env import init_ray

        try:
            init_ray(None, log_to_driver=False)
        except BaseException as e:  # re-raised where the driver meets Ray: ``wait``
            _errors.append(e)

    # not a daemon: a refused table's exit waits for Ray to be up, then its exit handler stops it
    thread = threading.Thread(target=target, name="ray-start", daemon=False)
    _started.append(thread)
    thread.start()
    return True


def wait() -> None:
    """Wait for a Ray started by :func:`start_beside_checks` (nothing if none was). A start that
    failed beside the checks (on a loaded machine Ray's 30 s for its raylet can run out while
    the checks take the cores) is undone here: the caller then starts Ray where it always did,
    with the checks done, and says that start's failure, if it fails again."""
    _claimed.append(True)
    for thread in _started:
        thread.join()
    if _errors:
        import ray

        ray.shutdown()  # what the failed start left, before the caller's own start
        _errors.clear()


def stop_unclaimed() -> None:
    """Stop a Ray started beside the checks that the driver never went on to use (a refusal
    after it started); the next command in this process starts afresh."""
    try:
        if not _started or _claimed:
            return
        for thread in _started:
            thread.join()
        import ray

        if ray.is_initialized():
            ray.shutdown()
    finally:
        _started.clear()
        _errors.clear()
        _claimed.clear()
