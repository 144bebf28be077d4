"""A table's closing advice: a failure that would repeat (a member that cannot be set up, a step
that raises, a NaN at a fixed seed) says to fix it first; only other failures say --resume."""

from orchestrator.run.failures import closing_advice


def test_a_deterministic_failure_says_fix_it_not_resume():
    line = closing_advice(["could not be set up: ValueError: teacher names must be unique",
                           "failed at step 1 in method 'misfit' (text batch of 8): RuntimeError"])
    assert "fix the setting or the method first" in line and "--resume alone would fail" in line


def test_a_worker_that_died_says_resume():
    line = closing_advice(["ActorDiedError: the worker died"])
    assert line == "some runs failed; run the same command with --resume to run only those"
    mixed = closing_advice(["ActorDiedError", "non-finite loss at step 3: term 'total' is nan"])
    assert "1 for a reason in their settings or method" in mixed and "--resume" in mixed


def test_resume_says_when_the_checkpoints_of_a_started_array_are_gone(tmp_path, capsys):
    from orchestrator.run.resume import say_lost_checkpoints
    from orchestrator.spec.plan import ArrayPlan, RunPlan
    from orchestrator.tracking.client import Tracker
    from trainables.config.profiles import build_config

    tr = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = tr.start_parent("t", "table", "p", {})
    child = tr.start_child(parent, {"key": "a/seed-0", "cell": "a", "seed": 0, "grid": "g",
                                    "config_hash": "h", "run_name": "a", "run": {"seed": 0}})
    tr.log_result(child, {"step": 3, "stsb_dev": 60.0})  # it had trained: a checkpoint existed
    member = RunPlan("a/seed-0", "a", 0, build_config("demo", "mcse"), "a seed 0", "a | seed 0")
    array = ArrayPlan("t", (member,), str(tmp_path / "runs"), 1.0, 0.0, parent=parent)
    storage = str(tmp_path / "runs")
    say_lost_checkpoints(tr, parent, storage, [array])
    err = capsys.readouterr().err
    assert f"the checkpoints of a seed 0 are gone from {tmp_path / 'runs' / array.name}" in err
    assert "1 started run(s) train again from step 0" in err
    (tmp_path / "runs" / array.name / "checkpoint_2026-11-26_10-00-00.000000").mkdir(parents=True)
    say_lost_checkpoints(tr, parent, storage, [array])
    assert capsys.readouterr().err == ""


def test_the_dry_run_on_a_cluster_plans_the_arrays_the_cluster_will_run(monkeypatch, capsys):
    """Issue 31: with --address the dry run planned one array where the real run made four; it
    now counts the cluster's nodes (and its GPU default) as the real run does."""
    import ray

    import orchestrator.run.resources as resources
    import trainables.runtime.ray_env as ray_env
    from orchestrator.run.dry_run import dry_run_arrays
    from orchestrator.run.options import Options
    from orchestrator.spec.plan import RunPlan
    from trainables.config.profiles import build_config

    joined = []
    monkeypatch.setattr(ray_env, "init_ray", lambda address, **kw: joined.append(address))
    monkeypatch.setattr(resources, "cluster_nodes", lambda: [{"CPU": 8.0, "GPU": 1.0}] * 4)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 32.0, "GPU": 4.0})
    monkeypatch.setattr(ray, "shutdown", lambda: joined.append("left"))
    cfg = build_config("demo", "mcse")
    members = [RunPlan(f"c/s{s}", "c", s, cfg, "x", "x") for s in range(8)]
    arrays, slots = dry_run_arrays(members, {m.key: "same" for m in members}, "t",
                                   Options(address="ray://head:10001", storage="runs"))
    assert joined == ["ray://head:10001", "left"]  # joined for a moment, then left
    assert slots == 4 and len(arrays) == 4 and all(t.gpus == 1.0 for t in arrays)
    assert "cluster ray://head:10001: 4 node(s) now, 4 array(s) at a time" in capsys.readouterr().out


def test_rays_out_of_memory_kill_is_one_line():
    """Seen on a shared machine: Ray's memory monitor killed the Tune actors and the driver ended
    with a 170-line traceback holding Ray's report of every worker it killed."""
    from orchestrator.run.failures import memory_short

    text = ("RuntimeError: Caught unexpected exception: 6 worker(s) were killed due to the node "
            "running low on memory. Memory on the node (IP: 10.0.0.2, ID: e22e) was 21.73GB used "
            "/ 23.54GB limit (0.923099)\nConsidered workers: [\nSelected to kill: ...")
    assert memory_short(text) == ("this machine ran out of memory: Ray killed 6 worker(s) "
                                  "(21.73GB used of 23.54GB)")
    assert memory_short("RuntimeError: something else") is None
