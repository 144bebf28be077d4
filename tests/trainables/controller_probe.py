"""A Train callback that records, from Ray Train's controller, what that process has imported and
which actors are alive in the cluster while the run reports."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ray.train.v2.api.callback import UserCallback


class ControllerProbe(UserCallback):
    def __init__(self, out: Path) -> None:
        self.out = str(out)

    def after_report(self, run_context, metrics, checkpoint) -> None:
        from trainables.runtime.ray_private import state

        alive = sorted(a.get("ActorClassName", "") for a in state.actors().values()
                       if a.get("State") == "ALIVE")
        Path(self.out).write_text(json.dumps({"pid": os.getpid(), "torch": "torch" in sys.modules,
                                              "actors": alive}))
