"""A Train callback that records, from Ray Train's controller, what that process has imported."""

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
        Path(self.out).write_text(json.dumps({"pid": os.getpid(), "torch": "torch" in sys.modules}))
