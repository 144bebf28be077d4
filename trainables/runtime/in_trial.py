"""An array of one worker trained inside its Tune trial: one process where Ray Train starts three.

A Train V2 run is a controller, a synchronization actor and its workers, each a Python process
that imports Ray and Train (about 5.5 CPU seconds each, ``bench/README.md``) before a worker
imports torch. An array of one worker averages no gradients, so none of that does anything for
it: its Tune trial holds the array's CPUs/GPUs itself (``orchestrator.run.trial``) and runs the
same loop (``trainables.train.run_array``, through ``train_in_trial`` there) in its own process,
with the session here. What Train did for it is done here:

- checkpoints go where Train put them, ``<storage>/<run name>/checkpoint_*``, whole or absent
  (``checkpoint_store``); the newest is loaded when the trial starts, so Tune's restart of a
  failed trial (``--max-failures``) and ``--resume`` after a killed driver continue from it;
- every report reaches the trial's reports queue with its checkpoint's path, the item Train's
  callback made (``orchestrator.run.trial.QueueReports``).

Arrays of several workers still train through Ray Train (torch.distributed between them).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from trainables.runtime.checkpoint_store import CheckpointStore


class TrialSession:
    """``run_array``'s session in the trial's process (``trainables.train.TrainSession`` is
    the one in a Train worker)."""

    rank, world = 0, 1
    placement_group = ""  # the trial's group is Tune's, which frees it

    def __init__(self, store: CheckpointStore, reports: Any, gpus: float) -> None:
        self.store, self.reports, self.gpus = store, reports, gpus

    def device(self) -> Any:
        import torch

        # Ray shows a trial only the GPUs it holds (CUDA_VISIBLE_DEVICES): its first is index 0.
        if self.gpus > 0 and torch.cuda.is_available():
            return torch.device("cuda", 0)
        return torch.device("cpu")

    def check_alive(self) -> None:
        """Nothing to check: a trial Tune stops takes this process, and the array, with it."""

    def checkpoint(self) -> contextlib.AbstractContextManager[Path | None]:
        return self.store.opened(self.store.latest())

    def report(self, metrics: dict[str, Any], ckpt_dir: Path | None = None) -> None:
        item = dict(metrics)
        if ckpt_dir is not None:
            item["checkpoint_path"] = self.store.save(ckpt_dir)
        self.reports.put(item)

    def progress(self, item: dict[str, Any]) -> None:
        self.reports.put_nowait({**item, "progress": 1})
