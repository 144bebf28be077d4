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


def _mirror(journal, reuse=None, one_by_one=None):
    members = plan_runs(GRID, "demo")
    (trial,) = pack(members, {m.key: "same" for m in members}, "t", "runs", 1.0, 0.0, 1,
                    array_size=None, slots=1)
    return (MlflowMirror([trial], journal, "parent", reuse, one_by_one),
            SimpleNamespace(config={"index": 0}))


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


class MetricBox(FakeOutbox):
    """Keeps the metrics themselves: (run, name, step) of every value the mirror logs."""

    def __init__(self):
        super().__init__()
        self.values: list[tuple[str, str, int]] = []

    def log_result(self, run, metrics):
        from orchestrator.tracking.client import _is_metric

        super().log_result(run, metrics)
        self.values += [(run, k, int(metrics["step"])) for k, v in metrics.items()
                        if _is_metric(k, v)]


def test_each_metric_is_logged_once_per_step():
    """The final report repeats best_stsb_dev and best_step at the step of the last evaluation."""
    box = MetricBox()
    mirror, trial = _mirror(box)
    mirror.on_trial_start(0, [], trial)
    mirror.on_trial_result(0, [], trial, _eval(3))
    last = _eval(6)
    for e in last["members"]:
        e["best_step"] = 6
    mirror.on_trial_result(0, [], trial, last)
    final = {"step": 6, "final": 1, "members": [
        {"key": k, "test/avg": 71.0, "best_stsb_dev": 76.0, "best_step": 6, "steps": 6}
        for k in ("mcse/seed-0", "mcse/seed-1")]}
    mirror.on_trial_result(0, [], trial, final)
    assert len(box.values) == len(set(box.values)), sorted(box.values)
    names = {(k, s) for run, k, s in box.values if run == "run-mcse/seed-0"}
    assert {("best_stsb_dev", 6), ("best_step", 6), ("test/avg", 6), ("steps", 6),
            ("stsb_dev", 3), ("stsb_dev", 6)} <= names
    assert box.ended["run-mcse/seed-0"] == "FINISHED"


class TagBox(FakeOutbox):
    """Keeps the tags and the start records the mirror writes."""

    def __init__(self):
        super().__init__()
        self.tags: dict[tuple[str, str], str] = {}
        self.records: dict[str, dict] = {}

    def start_child(self, parent, record, reuse=None):
        self.records[record["key"]] = record
        return super().start_child(parent, record, reuse)

    def set_tag(self, run, key, value):
        self.tags[(run, key)] = value


def test_an_array_that_falls_back_one_by_one_tags_its_members_and_the_parent_once():
    box = TagBox()
    mirror, trial = _mirror(box)
    mirror.on_trial_start(0, [], trial)
    why = "RuntimeError: vmap: ... .item() ... (at mine.py line 3: x.item())"
    for step in (3, 6):  # every report repeats it: tagged once
        mirror.on_trial_result(0, [], trial, {**_eval(step), "one_by_one": {"mcse": why}})
    for k in ("mcse/seed-0", "mcse/seed-1"):
        assert box.tags[(f"run-{k}", "mmemb.batched")] == "false"
        assert box.tags[(f"run-{k}", "mmemb.batched_reason")] == why
        assert box.tags[(f"run-{k}", "mmemb.event.one_by_one")] == f"method mcse: {why}"
    assert box.tags[("parent", "mmemb.batched")] == "false"
    assert box.tags[("parent", "mmemb.batched_reason")] == f"mcse: {why}"


def test_a_nan_and_the_filter_and_pruning_are_tagged_as_events():
    box = TagBox()
    mirror, trial = _mirror(box)
    mirror.on_trial_start(0, [], trial)
    nan = "non-finite loss at step 4: term 'grounding_image' is nan (config abc); lower lr"
    mirror.on_trial_result(0, [], trial, {"step": 4, "members": [
        {"key": "mcse/seed-0", "failed": 1, "error": nan},
        {"key": "mcse/seed-1", "pruned": 1, "step": 4}]})
    assert box.tags[("run-mcse/seed-0", "mmemb.event.nan")] == nan
    assert box.tags[("run-mcse/seed-1", "mmemb.event.pruned")] == \
        "pruned by successive halving at step 4"
    assert box.ended == {"run-mcse/seed-0": "FAILED", "run-mcse/seed-1": "FINISHED"}


def test_a_child_s_params_are_the_settings_its_method_reads():
    box = TagBox()
    mirror, trial = _mirror(box, one_by_one=None)
    mirror.on_trial_start(0, [], trial)
    rec = box.records["mcse/seed-0"]
    obj = rec["run"]["objective"]
    # MCSE's adaptive_margin is on by default but acts only with a margin > 0 (0 here)
    assert obj["adaptive_margin"] is False and "grounding_margin" not in obj
    assert "text_teachers" not in rec["run"]  # MCSE reads no text teachers
    assert {"objective.grounding_margin", "objective.threshold", "text_teachers"} <= set(
        rec["unread"])
    assert rec["batched_reason"] is None and rec["ignored"] == ""
    assert rec["cell_label"] == "1. MCSE"
