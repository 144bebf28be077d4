"""bench/paper_shapes.py, shorter: generated data in the paper profile's formats (smaller sizes,
a tiny student with the bert-base-uncased vocabulary) under ``$MMEMB_DATA``, then ``--profile
paper`` trains an array of two through a dev evaluation and the seven-task test evaluation, in
process and end to end through ``orchestrator.ablate`` (Ray Tune, Ray Train, MLflow), with the
same configs both ways. Needs the real SentEval data and the MiniLM wheel (its vocabulary)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SENTEVAL

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory, senteval_dir, minilm):
    out = tmp_path_factory.mktemp("paper")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "bench/paper_shapes.py", "--out", str(out), "--text-lines", "3000",
         "--images", "100", "--dim", "32", "--hidden", "32", "--layers", "2", "--heads", "4",
         "--steps", "2", "--threads", "1", "--senteval", str(senteval_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    return proc, out


def test_generated_files_are_the_paper_profiles(run):
    proc, out = run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = out / "data"
    lines = (data / "wiki1m_for_simcse.txt").read_text().splitlines()
    assert len(lines) == 3000 and all(8 <= len(s.split()) <= 40 for s in lines)
    sys.path.insert(0, str(ROOT))
    from trainables.data.store import FeatureStore

    store = FeatureStore(data / "flickr30k_clip_vitl14.parquet")
    assert len(store) == 500 and store.dim("image") == store.dim("clip_text") == 32
    assert store.metadata.page_checksums and store.metadata.normalized
    assert len(set(store.image_ids().tolist())) == 100
    # what the paper profile reads for MCSE: its own store, one caption an image, ResNet-sized
    mcse = FeatureStore(data / "flickr30k_mcse_resnet50.parquet")
    assert len(mcse) == 100 and mcse.feature_columns == ("image",) and mcse.dim("image") == 2048
    assert mcse.batch([0])["caption"][0] == store.batch([0])["caption"][0]
    assert (data / "senteval" / "downstream").resolve() == SENTEVAL.resolve()
    for t in ("unsup-simcse-bert-base-uncased", "DiffCSE-bert-base-uncased"):
        assert (data / "teachers" / t / "config.json").is_file()
    snap = out / "hf" / "models--bert-base-uncased" / "snapshots"
    (rev,) = list(snap.iterdir())
    assert (out / "hf" / "models--bert-base-uncased" / "refs" / "main").read_text() == rev.name
    assert len((rev / "vocab.txt").read_text().splitlines()) == 30522  # bert-base-uncased's
    env = (out / "env.sh").read_text()
    assert f"export MMEMB_DATA={data}" in env and "HF_HUB_OFFLINE=1" in env


def test_measured_in_process(run):
    proc, out = run
    assert proc.returncode == 0, proc.stdout[-3000:]
    m = json.loads((out / "paper_shapes.json").read_text())["measure"]
    assert [s["kind"] for s in m["steps"]] == ["pair", "text"]  # the official alternation starts on a caption batch
    assert all(s["s"] > 0 and s["peak_rss"] > 0 for s in m["steps"])
    assert len(m["dev_evals"]) == 1 and m["dev_evals"][0]["sentences"] > 2000  # STS-B dev, distinct
    assert m["test_eval"]["s"] > 0 and m["checkpoints"][0]["bytes"] > 0
    # MCSE trains on its own store (one caption an image: 100 pairs), as the paper profile says
    assert m["data"] == {"n_text": 3000, "n_pair": 100, "steps_per_epoch": 49, "paired_sample_step": 23,
                         "total_steps_full": 147, "first_kinds": (("P" + "t" * 22) * 2)[:40]}
    official = [r for r in m["schedule"] if r["official"]]
    assert len(official) == 3
    for r in official:  # trainables.data.schedule at the official sizes is the official code's count
        assert {k: r["ours"][k] for k in r["official"]} == r["official"], r["setting"]
    for key, final in m["finals"].items():
        assert math.isfinite(final["test/avg"]) and final["steps"] == 2, key
    # the figures bench/README.md records are printed, under the environment they depend on
    assert "# git" in proc.stdout and "# torch" in proc.stdout
    assert "MCSE wiki+flickr (batch 64): ours 16,091" in proc.stdout and "48,273: the same" in proc.stdout
    assert "DIFFERENT" not in proc.stdout and "per member above the process" in proc.stdout
    assert "seven-task test evaluation (every member):" in proc.stdout


def test_end_to_end_through_the_orchestrator(run):
    proc, out = run
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = json.loads((out / "paper_shapes.json").read_text())
    e = report["e2e"]
    assert e["rc"] == 0 and "--profile paper" in e["command"]
    import mlflow

    client = mlflow.MlflowClient(e["tracking_uri"])
    runs = client.search_runs([client.get_experiment_by_name("mmemb").experiment_id],
                              "tags.`mmemb.seed` != ''")
    hashes = {r.data.tags["mmemb.seed"]: r.data.tags["mmemb.config_hash"] for r in runs}
    assert hashes == {"0": report["measure"]["config_hashes"]["mcse/seed-0"],
                      "1": report["measure"]["config_hashes"]["mcse/seed-1"]}
    arrays = {r.data.tags.get("mmemb.array") for r in runs}
    assert len(arrays) == 1 and None not in arrays  # the two runs trained as one array
    for r in runs:
        assert math.isfinite(r.data.metrics["test/avg"]) and "best_stsb_dev" in r.data.metrics


def test_the_paper_profile_dry_run_prices_table3(run):
    proc, out = run
    assert proc.returncode == 0, proc.stdout[-3000:]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for line in (out / "env.sh").read_text().splitlines():
        key, value = line.removeprefix("export ").split("=", 1)
        env[key] = value.strip("'")
    env["PYTHONPATH"] = str(ROOT)
    dry = subprocess.run([sys.executable, "-m", "orchestrator.ablate", "--grid", "table3", "--profile", "paper",
                          "--dry-run"], cwd=out, env=env, capture_output=True, text=True, timeout=600)
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert "20 runs (4 cells x 5 seeds)" in dry.stdout and "cost: an ESTIMATE" in dry.stdout
    assert "GPU-hours" in dry.stdout and "g5.xlarge" in dry.stdout and "$" in dry.stdout
    assert "dry run: everything checked, nothing started" in dry.stdout
