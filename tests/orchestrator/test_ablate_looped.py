"""A table whose student the stacked encoder cannot express: a tiny DistilBERT, through
``python -m orchestrator.ablate`` with a YAML profile pointing at its folder. It runs to the
report through the looped fallback, says once per array why it is slower, and every member ends
in MLflow as a stacked member would: test scores, dev curve, a loadable model, plus its backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import ablate
from orchestrator.tracking.client import Tracker
from trainables.testing import write_tiny_profile

GRID = str(Path(__file__).parent / "grid_tiny.py")  # MCSE vs KDMCSE, seeds 0 and 1


@pytest.fixture(scope="module")
def ray_session():
    import ray

    from trainables.runtime.ray_env import init_ray

    init_ray(num_cpus=2, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow  # about 100 s on 2 shared cores: a Ray session, 2 arrays, the report
def test_a_distilbert_student_runs_a_table(tmp_path, tiny_distilbert, ray_session, capsys):
    write_tiny_profile(tmp_path, tiny_distilbert, max_steps=3, eval_every=3)
    rc = ablate.main(["--grid", GRID, "--profile", str(tmp_path / "tiny.yaml"),
                      "--storage", str(tmp_path / "runs"),
                      "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    out = capsys.readouterr().out
    assert rc == 0
    note = ("distilbert: not expressible as a stacked array (model_type='distilbert' is not "
            "supported by StackedEncoder, which implements bert and roberta); members train one "
            "by one (slower: no shared batched forward)")
    n_arrays = int(out.split(" runs in ")[1].split(" array")[0])
    assert out.count(note) == n_arrays  # once per array
    assert "| MCSE" in out and "| KDMCSE" in out  # the paper-shaped table
    tr = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (parent,) = tr.client.search_runs([tr.experiment_id], "tags.`mmemb.kind` = 'table'")
    children = tr.children(parent.info.run_id)
    assert len(children) == 4
    for c in children:
        assert c.info.status == "FINISHED"
        assert c.data.tags["mmemb.backend"] == "looped"
        assert c.data.tags["mmemb.backend_note"] == note
        assert "test/avg" in c.data.metrics and "test/STSBenchmark" in c.data.metrics
        assert tr.client.get_metric_history(c.info.run_id, "stsb_dev")
    import mlflow.sentence_transformers

    st = mlflow.sentence_transformers.load_model(children[0].data.tags["mmemb.model"])
    assert st.encode(["a dog runs on the beach ."]).shape == (1, 32)
    assert type(st[0].auto_model).__name__ == "DistilBertModel"
