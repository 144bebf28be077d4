"""The live view: a first line at once, a status line at least every LINE_S seconds while
anything trains, member-steps done/total with their rate, and one ETA for the whole campaign
that stays consistent from line to line (issue 18: silent for 2 minutes, then two ETAs of
6m01s and 2m00s printed in the same second)."""

from __future__ import annotations

import re
from types import SimpleNamespace

from orchestrator.run.live import LINE_S, LiveView
from orchestrator.spec.grids import Cell, Grid
from orchestrator.spec.plan import pack, plan_runs

GRID = Grid("t", "test", (Cell("MCSE", {"objective.method": "mcse"}),
                          Cell("KDMCSE", {"objective.method": "kdmcse"})),
            baseline="MCSE", seeds=(0, 1, 2, 3, 4))
STATUS = re.compile(r"^\[(\d+)m(\d\d)s\] (\d+)/(\d+) member-steps \(\d+%\), ([\d.]+)/s \| runs: "
                    r"(\d+) done, (\d+) training, (\d+) queued \| ETA (\d+)m(\d\d)s$")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _view(arrays: int = 2):
    members = plan_runs(GRID, "demo")
    plans = pack(members, {m.key: "same" for m in members}, "t", "runs", 1.0, 0.0, 1,
                 array_size=None, slots=arrays)
    clock, lines = Clock(), []
    view = LiveView(plans, clock=clock, out=lines.append)
    trials = [SimpleNamespace(config={"index": i}, status="RUNNING") for i in range(len(plans))]
    return view, plans, trials, clock, lines


def _status(lines):
    return [m for ln in lines for x in ln.splitlines() if (m := STATUS.match(x))]


def test_a_first_line_at_once_then_one_every_line_s_while_training():
    view, plans, trials, clock, lines = _view()
    view.on_step_begin(0, trials)
    assert len(lines) == 1 and "2 arrays (10 runs) starting" in lines[0]
    for _ in range(int(3 * LINE_S)):  # Tune's loop turns about every 0.1-1 s
        clock.now += 1
        view.on_step_begin(0, trials)
    assert len(lines) == 4  # one every LINE_S, none in between


def test_steps_rate_and_one_eta_for_the_campaign():
    view, plans, trials, clock, lines = _view()
    view.on_step_begin(0, trials)
    t0 = clock.now
    clock.now += 15
    for i in range(2):  # both arrays start training: 5 runs x 60 steps each
        view.on_trial_result(0, trials, trials[i], {"progress": 1, "step": 0, "total_steps": 60})
    for step in range(1, 13):  # 12 x 5 s of training at 1 step / 5 s per array
        clock.now += 5
        for i in range(2):
            view.on_trial_result(0, trials, trials[i],
                                 {"progress": 1, "step": step, "total_steps": 60})
        view.on_step_begin(0, trials)
    found = _status(lines)
    assert len(found) >= 3
    etas = []
    for m in found:
        done, total = int(m.group(3)), int(m.group(4))
        assert total == 600 and float(m.group(5)) == 2.0  # 10 member-steps per 5 s
        assert (m.group(6), m.group(7), m.group(8)) == ("0", "10", "0")
        etas.append(int(m.group(9)) * 60 + int(m.group(10)))
        assert etas[-1] == (600 - done) / 2.0
    # consistent: from one line to the next the ETA falls by the time between them
    times = [int(m.group(1)) * 60 + int(m.group(2)) for m in found]
    for i in range(1, len(times)):
        assert etas[i - 1] - etas[i] == times[i] - times[i - 1]
    assert times[0] >= 0 and clock.now - t0 == 75


def test_an_evaluation_and_the_runs_that_end_are_counted_once():
    view, plans, trials, clock, lines = _view(arrays=1)
    keys = [m.key for m in plans[0].members]
    view.on_trial_result(0, trials, trials[0], {"progress": 1, "step": 0, "total_steps": 60})
    clock.now += 30
    evaluation = {"step": 30, "total_steps": 60, "members": [
        {"key": k, "stsb_dev": 70.0 + i} for i, k in enumerate(keys)]}
    view.on_trial_result(0, trials, trials[0], evaluation)
    assert "step 30/60, STS-B dev 70.00-79.00" in lines[-1]
    assert "300/600 member-steps (50%)" in lines[-1]
    evaluation["members"][0] = {"key": keys[0], "failed": 1, "error": "loss is nan"}
    clock.now += 1
    view.on_trial_result(0, trials, trials[0], evaluation)
    assert f"FAILED {plans[0].members[0].label}: loss is nan" in lines[-1]
    assert "300/570 member-steps" in lines[-1]  # the failed run trains no more steps
    assert "runs: 0 done, 1 failed, 9 training" in lines[-1]
    clock.now += 30
    final = {"step": 60, "total_steps": 60, "final": 1, "members": [
        {"key": k, "test/avg": 71.0, "best_stsb_dev": 75.0} for k in keys[1:]]}
    view.on_trial_result(0, trials, trials[0], final)
    assert lines[-1].count("  done ") == 9 and "570/570 member-steps (100%)" in lines[-1]
    assert "runs: 9 done, 1 failed, 0 training" in lines[-1]


def test_the_final_evaluations_say_what_each_array_evaluates():
    """Once the steps are done the transfer tasks can take an hour on a CPU: the status line
    names the evaluation each array is in, and forgets an array whose runs ended."""
    view, plans, trials, clock, lines = _view()
    for i in range(2):
        view.on_trial_result(0, trials, trials[i], {"progress": 1, "step": 0, "total_steps": 60})
    clock.now += 10
    for i in range(2):
        view.on_trial_result(0, trials, trials[i], {"progress": 1, "step": 60, "total_steps": 60})
    clock.now += LINE_S
    view.on_step_begin(0, trials)
    assert lines[-1].endswith("| ETA: final evaluations")
    view.on_trial_result(0, trials, trials[0], {"progress": 1, "step": 60, "total_steps": 60,
                                                "evaluating": "transfer SST2 (5/7)"})
    view.on_trial_result(0, trials, trials[1], {"progress": 1, "step": 60, "total_steps": 60,
                                                "evaluating": "STS"})
    clock.now += LINE_S
    view.on_step_begin(0, trials)
    assert lines[-1].endswith(f"| ETA: final evaluations ({plans[0].label}: transfer SST2 (5/7); "
                              f"{plans[1].label}: STS)")
    final = {"step": 60, "total_steps": 60, "final": 1, "members": [
        {"key": m.key, "test/avg": 71.0, "best_stsb_dev": 75.0} for m in plans[0].members]}
    view.on_trial_result(0, trials, trials[0], final)
    assert lines[-1].splitlines()[0].endswith(f"| ETA: final evaluations ({plans[1].label}: STS)")


def test_lines_between_two_reports_agree_on_the_eta():
    """Issue 33: two status lines under a second apart said 33 s, then 11 s: the ETA is priced at
    the latest report, so between reports it falls by exactly the time that passed."""
    view, plans, trials, clock, lines = _view()
    view.on_step_begin(0, trials)
    for step in range(0, 4):
        clock.now += 5
        for i in range(2):
            view.on_trial_result(0, trials, trials[i],
                                 {"progress": 1, "step": step, "total_steps": 60})
    lines.clear()
    for dt in (4.0, 0.5, 3.0):  # no report in between
        clock.now += dt
        view.line(trials)
    found = _status(lines)
    etas = [int(m.group(9)) * 60 + int(m.group(10)) for m in found]
    times = [int(m.group(1)) * 60 + int(m.group(2)) for m in found]
    assert len(found) == 3 and all(float(m.group(5)) == 2.0 for m in found)
    for i in range(1, 3):
        assert abs((etas[i - 1] - etas[i]) - (times[i] - times[i - 1])) <= 1, (etas, times)


def test_a_search_has_one_clock_one_step_count_and_one_eta_across_its_phases():
    """A search's rounds, finalists and confirmation are campaigns of one view: the second phase
    goes on from the first's clock and steps, and the first already counts the runs after it."""
    from orchestrator.run.live import Prior

    members = plan_runs(GRID, "demo")
    plans = pack(members, {m.key: "same" for m in members}, "t", "runs", 1.0, 0.0, 1,
                 array_size=None, slots=1)
    clock, lines = Clock(), []
    prior = Prior(clock())
    trials = [SimpleNamespace(config={"index": 0}, status="RUNNING")]
    first = LiveView(plans, clock=clock, out=lines.append, later_runs=10, prior=prior)
    for step in range(0, 61, 10):  # 10 runs x 60 steps, 10 steps / 10 s
        clock.now += 10
        first.on_trial_result(0, trials, trials[0], {"progress": 1, "step": step, "total_steps": 60})
    first.line(trials)
    (m,) = _status(lines[-1:])
    assert (int(m.group(3)), int(m.group(4))) == (600, 1200)  # the next phase's 10 runs counted
    assert int(m.group(9)) * 60 + int(m.group(10)) == 60  # 600 steps left at 10/s
    prior.add(first)
    clock.now += 30  # between the phases (evaluation, packing)
    second = LiveView(plans, clock=clock, out=lines.append, prior=prior)
    clock.now += 10
    second.on_trial_result(0, trials, trials[0], {"progress": 1, "step": 0, "total_steps": 60})
    second.line(trials)
    (m,) = _status(lines[-1:])
    assert (int(m.group(3)), int(m.group(4))) == (600, 1200)  # goes on, no restart
    assert (int(m.group(1)), int(m.group(2))) == (1, 50)  # the search's clock: 70 + 30 + 10
    assert int(m.group(9)) * 60 + int(m.group(10)) == 60  # the first phase's rate carries over


def test_each_kind_of_member_event_is_one_line_per_campaign_the_rest_counted():
    """Pruned runs, NaN losses and the filter's stops: the first of each kind is said whole,
    the later ones are counted in the status line (issue 38: a line per kind per table)."""
    from orchestrator.tracking.events import Console

    view, plans, trials, clock, lines = _view()
    console = Console(lines.append)
    view.console = console
    keys = [m.key for m in plans[0].members]
    view.on_trial_result(0, trials, trials[0], {"progress": 1, "step": 0, "total_steps": 60})
    nan = "non-finite loss at step 30: term 'grounding_image' is nan (config {})"
    evaluation = {"step": 30, "total_steps": 60, "members": [
        {"key": keys[0], "failed": 1, "error": nan.format("a")},
        {"key": keys[1], "failed": 1, "error": nan.format("b")},
        {"key": keys[2], "pruned": 1, "step": 30}, {"key": keys[3], "pruned": 1, "step": 30},
        {"key": keys[4], "failed": 1, "error": "CUDA out of memory"}]}
    clock.now += 30
    view.on_trial_result(0, trials, trials[0], evaluation)
    said = lines[-1].splitlines()
    assert sum("FAILED" in x and "non-finite" in x for x in said) == 1
    assert sum(x.startswith("  pruned ") for x in said) == 1
    assert sum("CUDA out of memory" in x for x in said) == 1  # not an event: each failure said
    assert "(2 NaN, 2 pruned)" in said[0] or "(2 pruned, 2 NaN)" in said[0], said[0]
    # a later array's events of the same kinds: counted, not said
    keys1 = [m.key for m in plans[1].members]
    before = len(lines)
    view.on_trial_result(0, trials, trials[1], {"step": 30, "total_steps": 60, "members": [
        {"key": keys1[0], "pruned": 1, "step": 30},
        {"key": keys1[1], "failed": 1, "error": nan.format("c")}]})
    assert not any("pruned " in x or "FAILED" in x for ln in lines[before:]
                   for x in ln.splitlines()[1:])
    clock.now += LINE_S
    view.on_step_begin(0, trials)  # the next status line counts them
    assert "3 NaN" in lines[-1] and "3 pruned" in lines[-1], lines[-1]


def test_an_array_that_runs_a_method_one_by_one_is_said_once_unless_the_checks_said_it():
    from orchestrator.tracking.events import Console

    view, plans, trials, clock, lines = _view()
    view.console = Console(lines.append)
    view.console.event("one_by_one:dalr", "", say=False)  # the pre-start warning said it
    for i in (0, 1):
        view.on_trial_result(0, trials, trials[i], {"step": 30, "total_steps": 60, "members": [],
                                                    "one_by_one": {"mcse": "RuntimeError: x",
                                                                   "dalr": "RuntimeError: y"}})
    notes = [x for ln in lines for x in ln.splitlines() if "one by one" in x]
    assert notes == ["  note: method mcse: one by one: RuntimeError: x (its runs are tagged "
                     "mmemb.batched=false; the same numbers, slower)"]


def test_the_report_lists_each_kind_with_its_runs():
    from orchestrator.tracking.events import report_lines

    def run(cell, seed, **tags):
        return SimpleNamespace(data=SimpleNamespace(tags={
            "mmemb.cell": cell, "mmemb.seed": str(seed),
            **{f"mmemb.event.{k}": v for k, v in tags.items()}}))

    lines = report_lines([run("A", 0, pruned="pruned by successive halving at step 30"),
                          run("A", 1, pruned="pruned by successive halving at step 30"),
                          run("B", 0, nan="non-finite loss at step 4"), run("B", 1),
                          run("C", 0, ignored="objective.x (from cell C) is not read")])
    assert lines == [
        "- pruned by successive halving (a worse configuration, stopped at mid-run): A seed 0, "
        "A seed 1: pruned by successive halving at step 30",
        "- stopped by a non-finite loss: B seed 0: non-finite loss at step 4",
        "- given a setting its method does not read (the run trained without it): C seed 0: "
        "objective.x (from cell C) is not read"]
