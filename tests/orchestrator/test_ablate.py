"""The main job end to end on a tiny model: arrays as Tune trials, one MLflow child per member,
the report beside the store, --resume, --dry-run and --cells.

One Ray session and one MLflow store serve the whole module (both cost seconds to start).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from orchestrator import ablate, report
from orchestrator.tracking.client import Tracker
from trainables.testing import write_tiny_profile


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_bert):
    d = tmp_path_factory.mktemp("ablate")
    write_tiny_profile(d, tiny_bert, max_steps=3, eval_every=3)
    return d


@pytest.fixture(scope="module")
def ray_session():
    import ray

    from trainables.runtime.ray_env import init_ray

    init_ray(num_cpus=2, log_to_driver=False)
    yield
    ray.shutdown()


def args(d, *extra):
    return ["--grid", "table3", "--profile", str(d / "tiny.yaml"), "--seeds", "0", "1",
            "--storage", str(d / "runs"), "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}",
            *extra]


@pytest.fixture(scope="module")
def first_run(workdir, ray_session):
    rc = ablate.main(args(workdir))
    return rc


def test_table_runs_to_the_end_with_nested_runs(workdir, first_run):
    assert first_run == 0
    tr = Tracker(f"sqlite:///{workdir / 'mlflow.db'}")
    parents = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
    assert len(parents) == 1
    parent = parents[0]
    children = tr.children(parent.info.run_id)
    assert len(children) == 8  # 4 cells x 2 seeds
    keys = {c.data.tags["mmemb.trial"] for c in children}
    assert len(keys) == 8
    for c in children:
        t, m = c.data.tags, c.data.metrics
        assert c.info.status == "FINISHED"
        for tag in ("mmemb.grid", "mmemb.cell", "mmemb.seed", "mmemb.config_hash",
                    "git_commit", "git_dirty", "mmemb.checkpoint", "mmemb.array"):
            assert t.get(tag), tag
        assert (Path(t["mmemb.checkpoint"]) / "config.json").is_file()  # a loadable model folder
        assert t["mmemb.model"] == f"runs:/{c.info.run_id}/model"
        if t["mmemb.cell"] == "KDMCSE":  # the resolved objective, not None
            assert c.data.params["objective.grounding_margin"] == "0.15"
            assert json.loads(t["mmemb.objective"])["grounding_margin"] == 0.15
        for k in ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark",
                  "SICKRelatedness", "avg", "alignment", "uniformity"):
            assert f"test/{k}" in m, k
        assert c.data.params["objective.method"] in ("mcse", "kdmcse")
        assert tr.client.get_metric_history(c.info.run_id, "stsb_dev")  # the dev curve
    assert len({c.data.tags["mmemb.array"] for c in children}) == 2  # 8 members, 2 arrays
    # each best student is an MLflow model; Ray's copy is gone once MLflow holds it
    import mlflow.sentence_transformers

    st = mlflow.sentence_transformers.load_model(children[0].data.tags["mmemb.model"])
    assert st.encode(["a dog runs on the beach ."]).shape == (1, 32)
    assert not list((workdir / "runs").rglob("model.sentence_transformer"))
    assert not list((workdir / "runs").rglob("state.pt"))
    # Tune's CSV and JSON logs per trial, no TensorBoard files (MLflow holds the curves)
    assert len(list((workdir / "runs").rglob("result.json"))) == 2
    assert len(list((workdir / "runs").rglob("progress.csv"))) == 2
    assert not list((workdir / "runs").rglob("events.out.tfevents*"))
    assert "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS" not in os.environ  # for that fit alone
    reports = list((workdir / "reports").glob("kdmcse_table3-*/report.md"))
    assert len(reports) == 1  # beside the store, where a user looks
    arts = {a.path for a in tr.client.list_artifacts(parent.info.run_id)}
    assert {"report.md", "report.csv", "report.png", "grid.json"} <= arts
    md = tr.load_artifact_text(parent.info.run_id, "report.md")
    assert "KDMCSE" in md and "w/o AdapACSE" in md or "without AdapACSE" in md


def test_resume_starts_nothing_new(workdir, first_run, capsys):
    rc = ablate.main(args(workdir, "--resume"))
    assert rc == 0
    out = capsys.readouterr().out
    assert "8 already done, 0 to run" in out
    tr = Tracker(f"sqlite:///{workdir / 'mlflow.db'}")
    parents = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
    assert len(parents) == 1 and len(tr.children(parents[0].info.run_id)) == 8


def test_resume_runs_only_missing_trials(workdir, first_run, capsys):
    tr = Tracker(f"sqlite:///{workdir / 'mlflow.db'}")
    parent = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")[0]
    victim = next(c for c in tr.children(parent.info.run_id)
                  if c.data.tags["mmemb.cell"] == "KDMCSE" and c.data.tags["mmemb.seed"] == "1")
    tr.client.set_terminated(victim.info.run_id, "KILLED")  # as if the driver died mid-trial
    capsys.readouterr()
    assert ablate.main(args(workdir, "--resume")) == 0
    out = capsys.readouterr().out
    assert "7 already done, 1 to run" in out
    children = tr.children(parent.info.run_id)
    assert len(children) == 8  # the interrupted trial continued in its own run
    assert tr.client.get_run(victim.info.run_id).info.status == "FINISHED"


def test_report_rerenders_from_mlflow_alone(workdir, first_run, tmp_path, capsys):
    tr = Tracker(f"sqlite:///{workdir / 'mlflow.db'}")
    parent = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")[0]
    rc = report.main(["--run", parent.info.run_id, "--tracking-uri",
                      f"sqlite:///{workdir / 'mlflow.db'}", "--out", str(tmp_path)])
    assert rc == 0
    spec = json.loads(tr.load_artifact_text(parent.info.run_id, "grid.json"))
    csv_text = (tmp_path / "report.csv").read_text()
    for cell in spec["cells"]:
        assert cell in csv_text
    assert (tmp_path / "report.png").stat().st_size > 5000


@pytest.mark.slow
def test_cells_runs_a_subset_for_real_and_resume_of_the_grid_extends_it(workdir, ray_session,
                                                                         tmp_path, capsys):
    """Three real tables in a row (the default suite's longest test): the extension's rules are
    tests/orchestrator/tracking/test_extend.py, a resume for real test_resume_runs_only_missing_trials."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = ["--grid", "table3", "--profile", str(workdir / "tiny.yaml"), "--seeds", "0", "1",
            "--storage", str(tmp_path / "runs"), "--tracking-uri", uri]
    assert ablate.main([*argv, "--cells", "KDMCSE"]) == 0
    out = capsys.readouterr().out
    assert "| MCSE (baseline) |" in out and "| KDMCSE |" in out
    assert "| without AdapACSE" not in out  # only the cells that ran
    tr = Tracker(uri)
    (parent,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
    pid = parent.info.run_id
    assert parent.info.status == "FINISHED"
    assert len(tr.children(pid)) == 4
    assert report.main(["--run", pid, "--tracking-uri", uri, "--out", str(tmp_path / "r")]) == 0
    assert "| KDMCSE |" in (tmp_path / "r" / "report.md").read_text()

    capsys.readouterr()
    assert ablate.main([*argv, "--resume"]) == 0  # the whole grid: the subset's runs are reused
    out = capsys.readouterr().out
    assert f"extending parent run {pid}" in out and "4 already done, 4 to run" in out
    (again,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
    assert again.info.run_id == pid and again.info.status == "FINISHED"
    assert len(tr.children(pid)) == 8
    md = tr.load_artifact_text(pid, "report.md")
    assert "| without AdapACSE |" in md and "| without threshold filtering |" in md

    # a plain rerun on the same storage trains anew: it never reports the runs it did not train
    capsys.readouterr()
    assert ablate.main([*argv, "--cells", "KDMCSE"]) == 0
    out = capsys.readouterr().out
    assert "0 already done, 4 to run" in out
    (rerun,) = [p for p in tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
                if p.info.run_id != pid]
    before = {c.data.tags["mmemb.array"] for c in tr.children(pid)}
    after = {c.data.tags["mmemb.array"] for c in tr.children(rerun.info.run_id)}
    assert len(tr.children(rerun.info.run_id)) == 4 and not before & after
    assert all(list((tmp_path / "runs").glob(f"{a}/checkpoint_*")) or
               (tmp_path / "runs" / a).is_dir() for a in after)  # its own Train runs


@pytest.mark.parametrize("argv,msg", [
    (["--grid", "nope"], "unknown grid 'nope'"),
    (["--grid", "table3", "--profile", "/does/not/exist.yaml"], "does not exist"),
    (["--grid", "table3", "--seeds", "1", "1"], "--seeds 1 1: seeds must be distinct"),
    (["--grid", "table3", "--gpus-per-trial", "4"], "this machine has 0 GPUs"),
    (["--grid", "table3", "--tracking-uri", "http://127.0.0.1:9"], "unreachable"),
])
def test_bad_input_fails_before_anything_starts(argv, msg, workdir, ray_session, capsys, tmp_path,
                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    if "--profile" not in argv:
        argv = [*argv, "--profile", str(workdir / "tiny.yaml")]
    rc = ablate.main([*argv, "--storage", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err, err
    assert not (tmp_path / "runs").exists()  # nothing launched
    if "http" not in " ".join(argv):
        assert not (tmp_path / "mlflow.db").exists()  # nothing written


def test_bad_profile_content(workdir, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: -3\ndata:\n  demo: true\n")
    rc = ablate.main(["--grid", "table3", "--profile", str(bad)])
    assert rc == 2 and "lr=-3.0 must be a finite number > 0" in capsys.readouterr().err


def test_dry_run_prints_the_arrays_and_starts_nothing(workdir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = ablate.main(["--grid", "table3", "--profile", str(workdir / "tiny.yaml"), "--dry-run",
                      "--cells", "KDMCSE", "--array-size", "3", "--explain"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "10 runs (2 cells x 5 seeds) in 4 arrays" in out
    # --explain: each cell's run length, optimizer, precision and store
    runs = [line for line in out.splitlines() if line.startswith("  run: ")]
    assert len(runs) == 2 and all("optimizer official, precision fp32" in r for r in runs), runs
    assert all(" steps = " in r and " epoch(s) of " in r and "pairs " in r for r in runs), runs
    assert "kdmcse/seed-4" in out and "without-adapacse" not in out
    assert "dry run: everything checked, nothing started" in out
    assert not list(tmp_path.iterdir())  # no store, no runs folder


def test_dry_run_prices_the_plan_when_asked(workdir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = ["--grid", "table3", "--profile", str(workdir / "tiny.yaml"), "--dry-run", "--cells", "KDMCSE"]
    assert ablate.main(base) == 0
    assert "cost:" not in capsys.readouterr().out  # the demo profile prices nothing unless asked
    rc = ablate.main([*base, "--array-size", "5", "--gpu-type", "H100", "--mfu", "0.5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "cost: an ESTIMATE" in out and "10 runs in 2 arrays of 5 members" in out
    # the runs train in fp32 (the default): priced at the TF32 peak, never at a bf16 rate
    assert "FLOPs at 50% MFU of the H100's 494.5 TFLOP/s dense TF32 peak" in out
    assert re.search(r"on H100: [\d.,]+ GPU-hours", out)
    assert re.search(r"g5\.xlarge +1x A10G +1\.01 .* \$\d", out)
    assert ablate.main([*base, "--gpu-type", "V100"]) == 2
    assert "--gpu-type 'V100' is unknown" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ablate.main(["--grid", "table3", "--gpu-type", "H100"])  # pricing goes with --dry-run
    assert not list(tmp_path.iterdir())



def test_a_dry_run_prices_a_gpu_plan_on_a_machine_without_one(workdir, tmp_path, capsys, monkeypatch):
    """Planning a GPU table on a laptop: the arrays and the estimate print, then the refusal a real
    run would meet here, and a non-zero exit."""
    from orchestrator.run import preflight

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(preflight, "local_resources", lambda: {"CPU": 2.0, "GPU": 0.0})
    base = ["--grid", "table3", "--profile", str(workdir / "tiny.yaml"), "--cells", "KDMCSE",
            "--gpus-per-trial", "1", "--gpu-type", "H100"]
    rc = ablate.main([*base, "--dry-run"])
    cap = capsys.readouterr()
    assert rc == 2, cap.out + cap.err
    assert "1 GPU per array" in cap.out and re.search(r"on H100: [\d.,]+ GPU-hours", cap.out)
    assert "checked: resources: do NOT fit this machine (below)" in cap.out
    assert "dry run: everything checked" not in cap.out
    assert cap.err.strip().splitlines()[-1] == (
        "error: this plan does not run here (listed and priced above, nothing started): "
        "--gpus-per-trial 1 but this machine has 0 GPUs; lower it, use 0 for CPU runs, or join a "
        "GPU cluster with --address")
    assert not list(tmp_path.iterdir())
    # a real run is refused before anything starts, as before
    assert ablate.main(base[:-2]) == 2
    assert "--gpus-per-trial 1 but this machine has 0 GPUs" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_best_student_of_a_cell(workdir, first_run, tmp_path, capsys):
    from orchestrator import best

    tr = Tracker(f"sqlite:///{workdir / 'mlflow.db'}")
    parent = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")[0]
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    student = tmp_path / "student"
    assert best.main(["--run", parent.info.run_id, "--cell", "KDMCSE", "--tracking-uri", uri,
                      "--out", str(student)]) == 0
    out = capsys.readouterr().out
    scores = {c.data.tags["mmemb.seed"]: c.data.metrics["test/avg"]
              for c in tr.children(parent.info.run_id) if c.data.tags["mmemb.cell"] == "KDMCSE"}
    top = max(scores, key=scores.get)
    assert f"cell KDMCSE: seed {top}, test/avg {scores[top]:.2f}" in out
    printed = re.search(r'SentenceTransformer\("([^"]+)"\)', out).group(1)
    assert Path(printed) == student / "model.sentence_transformer"  # as the README says
    from sentence_transformers import SentenceTransformer

    assert SentenceTransformer(printed).encode(["a dog runs"]).shape == (1, 32)
    assert best.main(["--run", parent.info.run_id, "--cell", "KDMCSE", "--tracking-uri", uri,
                      "--out", str(student)]) == 2  # never over a folder that holds something
    assert "already exists and is not an empty folder" in capsys.readouterr().err
    assert best.main(["--run", parent.info.run_id, "--cell", "nope", "--tracking-uri", uri]) == 2
    assert "no finished run with a model in cell 'nope'" in capsys.readouterr().err
