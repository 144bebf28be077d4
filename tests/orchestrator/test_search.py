"""The search end to end on a tiny model: rounds of configurations x seeds trained as arrays and
halved inside them, finalists on fresh seeds, the verdict, the confirmation, the study in
MLflow, and --resume."""

from __future__ import annotations

import json

import optuna
import pytest

from orchestrator import search
from orchestrator.tracking.client import Tracker
from trainables.testing import write_tiny_profile


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_bert):
    import ray

    from trainables.runtime.ray_env import init_ray

    d = tmp_path_factory.mktemp("search")
    write_tiny_profile(d, tiny_bert, max_steps=4, eval_every=2)
    argv = ["--space", "kdmcse_search", "--profile", str(d / "tiny.yaml"), "--num-samples", "4",
            "--search-seeds", "0", "1", "--finalists", "2", "--finalist-seeds", "10",
            "--confirm-seeds", "7", "8", "--storage", str(d / "runs"),
            "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}"]
    init_ray(num_cpus=2, log_to_driver=False)
    rc = search.main(argv)
    yield d, argv, rc
    ray.shutdown()


def parent_and_kids(d):
    tr = Tracker(f"sqlite:///{d / 'mlflow.db'}")
    (parent,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'search'")
    return tr, parent, tr.children(parent.info.run_id)


def test_search_rounds_finalists_and_confirmation(run):
    d, _, rc = run
    assert rc == 0
    tr, parent, kids = parent_and_kids(d)
    keys = {c.data.tags["mmemb.trial"]: c for c in kids}
    search_keys = [k for k in keys if k.startswith("search/")]
    assert len(search_keys) == 8  # 4 configurations x 2 seeds
    pruned = [k for k in search_keys if "mmemb.stopped" in keys[k].data.tags]
    assert len(pruned) == 4  # halving at step 2 of 4 kept half the configurations, both seeds
    groups = {keys[k].data.tags["mmemb.group"] for k in pruned}
    assert len(groups) == 2 and all(f"search/{g.split('-')[1]}/seed-1" in pruned for g in groups)
    assert sum(k.startswith("final/") for k in keys) == 2  # 2 finalists x 1 fresh seed
    confirm = [c for k, c in keys.items() if k.startswith("confirm/")]
    assert sorted(c.data.tags["mmemb.cell"] for c in confirm) == \
        ["MCSE", "MCSE", "best of kdmcse_search", "best of kdmcse_search"]
    assert {c.data.tags["mmemb.seed"] for c in confirm} == {"7", "8"}  # fresh seeds
    for c in kids:
        assert c.info.status == "FINISHED"
        assert ("test/avg" in c.data.metrics) != ("mmemb.stopped" in c.data.tags), c.data.tags
    best = json.loads(tr.load_artifact_text(parent.info.run_id, "best.json"))
    assert best["overrides"]["objective.method"] == "kdmcse"
    assert 0.025 <= best["params"]["objective.grounding_margin"] <= 0.225
    assert len(best["seed_values"]) == 3  # 2 search seeds + 1 finalist seed
    md = tr.load_artifact_text(parent.info.run_id, "report.md")
    assert "best of kdmcse_search" in md and "Student" in md
    assert "Best configuration: trial" in md and "standard errors of the difference" in md
    arts = {a.path for a in tr.client.list_artifacts(parent.info.run_id)}
    assert {"search.md", "study.csv", "report.md", "grid.json"} <= arts
    url = f"sqlite:///{d / 'runs' / 'optuna.db'}"
    study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
    states = sorted(t.state.name for t in study.trials)
    assert states == ["COMPLETE", "COMPLETE", "PRUNED", "PRUNED"]
    # the search starts from the profile's own KDMCSE (demo recipe: lambda 1.0, filter off)
    first = min(study.trials, key=lambda t: t.number)
    assert first.params == {"objective.grounding_margin": 0.15, "objective.lam": 1.0,
                            "threshold_filter": "off"} and first.user_attrs["start"] == 1
    assert f"| {first.number} (the profile's own) |" in md
    assert md.startswith("**Against MCSE:** the winner is ")  # the first line, plainly


def test_the_verdict_stays_the_first_line_when_the_report_is_rendered_again(run, capsys):
    from orchestrator import report

    d, _, _ = run
    tr, parent, _ = parent_and_kids(d)
    out = d / "again"
    assert report.main(["--run", parent.info.run_id, "--tracking-uri",
                        f"sqlite:///{d / 'mlflow.db'}", "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert md.startswith("**Against MCSE:** the winner is ") and "## Search: " in md


def test_resume_adds_nothing_when_done(run, capsys):
    d, argv, _ = run
    capsys.readouterr()
    assert search.main([*argv, "--resume"]) == 0
    tr, parent, kids = parent_and_kids(d)
    assert len(kids) == 14


@pytest.mark.parametrize("argv,msg", [
    (["--space", "nope"], "unknown search 'nope'"),
    (["--space", "kdmcse_table3"], "is a grid"),
    (["--space", "kdmcse_search", "--num-samples", "1"], "--num-samples: 1 must be an integer >= 2"),
    (["--space", "kdmcse_search", "--confirm-seeds", "1", "1"], "--confirm-seeds 1 1"),
    (["--space", "kdmcse_search", "--confirm-seeds", "0", "5"], "must be fresh"),
])
def test_bad_search_options_are_refused_at_once(argv, msg, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        rc = search.main(argv)
    except SystemExit as e:  # a range argparse checks while parsing
        rc = e.code
    assert rc == 2
    assert msg in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
