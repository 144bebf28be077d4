"""The embedded Ray's start beside the opening of the MLflow store (bench/README.md, ``table_timing.py``).

Why: Ray's start is mostly the driver waiting on other processes (its GCS, raylet and agents
coming up, about 5 s on two quiet cores), and opening the MLflow store is the driver's own work
(a new store's schema, about 3 s). Side by side, a table's first seconds stop being their sum.
The pre-start checks have all run before either starts: Ray starts beside MLflow only, never
beside the checks' torch work (started there, on a loaded machine, Ray's 30 s for its raylet ran
out: bench/HISTORY.md).

Only the embedded Ray of a fresh run starts early: a cluster (``--address``) is joined where it
was, and ``--resume`` (which may have nothing left to train) and ``--queue`` (which may wait for
another driver) start Ray as before. A refusal after the start (the store, the parent run)
stops that Ray before its one line (:meth:`EarlyRay.stop_unclaimed`).
"""

from __future__ import annotations

import threading

from orchestrator.run.options import Options


class EarlyRay:
    """A start of the embedded Ray in a helper thread, claimed (or stopped) by the driver."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.claimed = False
        self.up = threading.Event()
        """set once the start has ended, whether Ray came up or not"""
        self.thread = threading.Thread(target=self._start, name="ray-start", daemon=True)
        self.thread.start()

    @classmethod
    def beside(cls, opts: Options) -> EarlyRay | None:
        """Start it now where this run would start the embedded Ray anyway (see above)."""
        if opts.address or opts.resume or opts.queue:
            return None
        from trainables.runtime import shipping

        shipping.check()  # what Ray would refuse to ship: refused before it starts
        return cls()

    def _start(self) -> None:
        from trainables.runtime.ray_env import init_ray

        try:
            init_ray(None, log_to_driver=False)
        except BaseException as e:  # said where the driver meets Ray: ``claim``
            self.error = e
        finally:
            self.up.set()
        # Ray's daemons are started with Linux's parent-death signal, which fires when the
        # *thread* that started them ends, not the process: this thread must outlive them.
        # It waits for ever; a daemon thread, it ends with the process, as Ray's daemons do.
        threading.Event().wait()

    def claim(self) -> None:
        """Wait for the start. One that failed is undone, so that the caller starts Ray where it
        always did and says that start's failure if it fails again."""
        self.claimed = True
        self.up.wait()
        if self.error is not None:
            import ray

            ray.shutdown()  # what the failed start left, before the caller's own start
            self.error = None

    def stop_unclaimed(self) -> None:
        """Stop a Ray the driver never went on to use (a refusal after it started)."""
        if self.claimed:
            return
        self.claimed = True
        self.up.wait()
        import ray

        if ray.is_initialized():
            ray.shutdown()
