"""Optuna search through Tune with ASHA, ended by the confirmation re-run (tiny model)."""

from __future__ import annotations

import json

import optuna
import pytest

from orchestrator import search
from orchestrator.tracking import Tracker
from trainables.testing import write_tiny_profile


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_bert):
    import ray

    from trainables.train import init_ray

    d = tmp_path_factory.mktemp("search")
    write_tiny_profile(d, tiny_bert, max_steps=4, eval_every=2)
    argv = ["--space", "kdmcse_search", "--profile", str(d / "tiny.yaml"), "--num-samples", "2",
            "--confirm-seeds", "7", "8", "--storage", str(d / "runs"),
            "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}"]
    init_ray(num_cpus=2, log_to_driver=False)
    rc = search.main(argv)
    yield d, argv, rc
    ray.shutdown()


def test_search_then_confirmation_on_fresh_seeds(run):
    d, _, rc = run
    assert rc == 0
    tr = Tracker(f"sqlite:///{d / 'mlflow.db'}")
    (parent,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'search'")
    kids = tr.children(parent.info.run_id)
    cells = sorted(c.data.tags["mmemb.cell"] for c in kids)
    assert cells.count("search") == 2
    assert cells.count("MCSE") == 2 and cells.count("best of kdmcse_search") == 2
    assert {c.data.tags["mmemb.seed"] for c in kids if c.data.tags["mmemb.cell"] != "search"} \
        == {"7", "8"}  # fresh seeds, not the search's
    # every child ends FINISHED: with its test scores, or tagged as stopped early by ASHA
    for c in kids:
        assert c.info.status == "FINISHED"
        assert ("test/avg" in c.data.metrics) != ("mmemb.stopped" in c.data.tags), c.data.tags
    assert all("test/avg" in c.data.metrics for c in kids if c.data.tags["mmemb.cell"] != "search")
    best = json.loads(tr.load_artifact_text(parent.info.run_id, "best.json"))
    assert best["overrides"]["objective.method"] == "kdmcse"
    assert 0.025 <= best["params"]["objective.grounding_margin"] <= 0.225
    md = tr.load_artifact_text(parent.info.run_id, "report.md")
    assert "best of kdmcse_search" in md and "Student" in md
    study = optuna.load_study(study_name=optuna.get_all_study_names(
        f"sqlite:///{d / 'runs' / 'optuna.db'}")[0], storage=f"sqlite:///{d / 'runs' / 'optuna.db'}")
    assert len([t for t in study.trials if t.state.is_finished()]) == 2


def test_resume_adds_nothing_when_done(run, capsys):
    d, argv, _ = run
    assert search.main([*argv, "--resume"]) == 0
    assert "2 search trials (2 done)" in capsys.readouterr().out
    tr = Tracker(f"sqlite:///{d / 'mlflow.db'}")
    (parent,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'search'")
    assert len(tr.children(parent.info.run_id)) == 6


def test_unknown_space_and_bad_samples(capsys):
    assert search.main(["--space", "nope"]) == 2
    assert "unknown search 'nope'" in capsys.readouterr().err
    assert search.main(["--space", "kdmcse_search", "--num-samples", "0"]) == 2
    assert "--num-samples 0 must be >= 1" in capsys.readouterr().err
