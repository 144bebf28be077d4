"""python -m orchestrator.calibrate end to end on the tiny model: members through a session,
the report stored; bad settings refused before anything starts."""

from __future__ import annotations

import pytest


# --- the command, end to end on the tiny model -------------------------------------------------
@pytest.fixture(scope="module")
def tiny_calibration(tmp_path_factory, tiny_bert):
    import ray

    from orchestrator import calibrate as cmd
    from trainables.runtime.ray_env import init_ray
    from trainables.testing import write_tiny_profile

    d = tmp_path_factory.mktemp("calibrate")
    write_tiny_profile(d, tiny_bert, max_steps=3, eval_every=3)
    argv = ["--profile", str(d / "tiny.yaml"), "--runs", "4", "--control-runs", "2",
            "--group-size", "2", "--family-cells", "1", "--draws", "200",
            "--storage", str(d / "runs"), "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}"]
    init_ray(num_cpus=2, log_to_driver=False)
    try:
        rc = cmd.main(argv)
        rc_resume = cmd.main([*argv, "--resume"])  # nothing left to train: recomputes only
    finally:
        ray.shutdown()
    return d, rc, rc_resume


@pytest.mark.slow  # a real session of members: ~40 s
def test_command_runs_members_through_a_session_and_stores_the_report(tiny_calibration):
    import json

    from orchestrator.tracking.client import Tracker

    d, rc, rc_resume = tiny_calibration
    assert rc == 0 and rc_resume == 0
    tr = Tracker(f"sqlite:///{d / 'mlflow.db'}")
    parents = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'calibration'")
    assert len(parents) == 1  # --resume reused it
    parent = parents[0]
    children = tr.children(parent.info.run_id)
    cells = sorted((c.data.tags["mmemb.cell"], int(c.data.tags["mmemb.seed"])) for c in children)
    assert cells == [("MCSE", 0), ("MCSE", 1), ("MCSE", 2), ("MCSE", 3), ("SimCSE", 0), ("SimCSE", 1)]
    arts = {a.path for a in tr.client.list_artifacts(parent.info.run_id)}
    assert {"calibration.md", "calibration.json", "calibration.png", "report.md"} <= arts
    cal = json.loads(tr.load_artifact_text(parent.info.run_id, "calibration.json"))
    assert cal["group_size"] == 2 and cal["spreads"]["MCSE"]["n"] == 4
    assert cal["aa"]["student"]["draws"] == 200 and cal["aa"]["student"]["m"] == 1
    m = parent.data.metrics
    assert 0 <= m["calib/fpr_student"] <= 1 and m["calib/sd_MCSE"] > 0
    md = (next((d / "reports").glob("calibration-*")) / "calibration.md").read_text()
    assert "### Verdict" in md and "4 MCSE runs (seeds 0-3) and 2 SimCSE runs" in md


@pytest.mark.parametrize(("argv", "msg"), [
    (["--runs", "9"], "--runs 9 must be >= 10"),
    (["--control-runs", "3"], "--control-runs 3 must be 0 or between"),
    (["--group-size", "1"], "--group-size: 1 must be an integer >= 2"),
])
def test_bad_settings_fail_before_anything_starts(argv, msg, tmp_path, monkeypatch, capsys):
    from orchestrator import calibrate as cmd

    monkeypatch.chdir(tmp_path)
    try:
        rc = cmd.main(argv)
    except SystemExit as e:  # a range argparse checks while parsing
        rc = e.code
    assert rc == 2
    assert msg in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
