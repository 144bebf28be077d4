"""The MLflow mirror: one child per member, and a resumed array's re-sent evaluation logged once."""

from __future__ import annotations

from types import SimpleNamespace

from orchestrator.spec.grids import Cell, Grid
from orchestrator.spec.plan import pack, plan_runs
from orchestrator.tracking.mirror import MlflowMirror

GRID = Grid("t", "test", (Cell("MCSE", {"objective.method": "mcse"}),), baseline="MCSE", seeds=(0, 1))


class FakeOutbox:
    """Records what the mirror would write to MLflow."""

    def __init__(self, history: dict[str, list[int]] | None = None):
        self.started: list[str] = []
        self.logged: list[tuple[str, int]] = []
        self.ended: dict[str, str] = {}
        self.tracker = SimpleNamespace(client=SimpleNamespace(
            get_metric_history=lambda run, name: [SimpleNamespace(step=s) for s in (history or {})[run]]))

    def start_child(self, parent, record, reuse=None):
        run = reuse or f"run-{record['key']}"
        self.started.append(run)
        return run

    def log_result(self, run, metrics):
        self.logged.append((run, int(metrics["step"])))

    def set_tag(self, run, key, value):
        pass

    def end(self, run, status):
        self.ended[run] = status


def _mirror(journal, reuse=None):
    members = plan_runs(GRID, "demo")
    (trial,) = pack(members, {m.key: "same" for m in members}, "t", "runs", 1.0, 0.0, 1,
                    array_size=None, slots=1)
    return MlflowMirror([trial], journal, "parent", reuse), SimpleNamespace(config={"index": 0})


def _eval(step: int, resumed: bool = False) -> dict:
    out = {"step": step, "members": [{"key": k, "stsb_dev": 70.0 + step, "best_stsb_dev": 70.0 + step}
                                     for k in ("mcse/seed-0", "mcse/seed-1")]}
    return {**out, "resumed": 1} if resumed else out


def test_a_tune_retry_resending_its_checkpoint_evaluation_logs_it_once():
    box = FakeOutbox()
    mirror, trial = _mirror(box)
    mirror.on_trial_start(0, [], trial)
    for result in (_eval(3), _eval(6), _eval(6, resumed=True)):  # a worker died after step 6
        mirror.on_trial_result(0, [], trial, result)
    steps = [s for run, s in box.logged if run == "run-mcse/seed-0"]
    assert steps == [3, 6]
    assert len(box.started) == 2  # one child per member, not per attempt


def test_a_resumed_driver_reads_the_history_once_and_fills_only_the_hole():
    box = FakeOutbox(history={"old-0": [3], "old-1": [3, 6]})
    mirror, trial = _mirror(box, reuse={"mcse/seed-0": "old-0", "mcse/seed-1": "old-1"})
    mirror.on_trial_start(0, [], trial)
    mirror.on_trial_result(0, [], trial, _eval(6, resumed=True))
    mirror.on_trial_result(0, [], trial, _eval(9))
    assert [s for run, s in box.logged if run == "old-0"] == [6, 9]  # the hole at 6 filled
    assert [s for run, s in box.logged if run == "old-1"] == [9]  # 6 was already there
