"""Demo corpus: deterministic, cached, grounded features that behave, graded STS gold, SentEval layout."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from trainables import demo_corpus
from trainables.demo_corpus import generate_demo
from trainables.evaluation import ALL_TASKS, DevEvaluator, evaluate_sts
from trainables.store import FeatureStore

STOP = {"a", "an", "the", "is", "are", "there", "can", "be", "seen", "in", "on", "at", "of", "by", ",", "."}


def _content(sentence: str) -> set[str]:
    return set(sentence.split()) - STOP


def _jaccard(a: str, b: str) -> float:
    x, y = _content(a), _content(b)
    return len(x & y) / max(len(x | y), 1)


def _files(root: Path) -> dict[str, bytes]:
    """Every generated file; hidden ones (the store reader's own .mmemb-cache) are not the corpus."""
    paths = [p for p in sorted(root.rglob("*")) if p.is_file()]
    return {str(p.relative_to(root)): p.read_bytes() for p in paths if not p.relative_to(root).parts[0].startswith(".")}


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    start = time.perf_counter()
    corpus = generate_demo(tmp_path_factory.mktemp("demo"))
    return corpus, time.perf_counter() - start


@pytest.fixture(scope="module")
def pairs(demo):
    store = FeatureStore(demo[0].pairs_store)
    return store, store.batch(np.arange(len(store)))


def test_fast_and_sized(demo, pairs):
    corpus, seconds = demo
    assert seconds < 5.0
    store, batch = pairs
    assert len(store) == 600 and store.dim("image") == store.dim("clip_text") == 512
    assert store.metadata.normalized is False
    lines = corpus.text_file.read_text().splitlines()
    assert len(lines) == 2000 == len(set(lines)) and all(line.strip() for line in lines)
    # Unnormalised, with the documented scale (about feature_norm = 1.1, with jitter).
    norms = np.linalg.norm(batch["image"], axis=1)
    assert 1.0 < norms.mean() < 1.2 and norms.std() > 0.01
    assert json.loads(corpus.manifest.read_text())["seed"] == 0


def test_deterministic_bytes_and_seed_changes_everything(tmp_path, demo):
    again = generate_demo(tmp_path / "again")
    assert _files(again.root) == _files(demo[0].root)  # same seed: byte-identical files
    other = generate_demo(tmp_path / "other", seed=1)
    assert other.text_file.read_text() != again.text_file.read_text()
    a = FeatureStore(other.pairs_store).column("image")
    b = FeatureStore(again.pairs_store).column("image")
    assert a.shape == b.shape and not np.allclose(a, b)
    assert (other.senteval_dir / "STS/STSBenchmark/sts-test.csv").read_bytes() != (
        again.senteval_dir / "STS/STSBenchmark/sts-test.csv"
    ).read_bytes()


def test_cache_is_reused_and_keyed_by_settings(tmp_path, monkeypatch):
    first = generate_demo(tmp_path, n_scenes=20, n_text=30, n_dev=10, n_test=10, dim=16)

    def boom(*args, **kwargs):
        raise AssertionError("regenerated although the cache matched")

    monkeypatch.setattr(demo_corpus, "_build", boom)
    assert generate_demo(tmp_path, n_scenes=20, n_text=30, n_dev=10, n_test=10, dim=16) == first
    monkeypatch.undo()
    second = generate_demo(tmp_path, n_scenes=20, n_text=31, n_dev=10, n_test=10, dim=16)
    assert second.root != first.root and first.manifest.exists()
    # A damaged manifest means a rebuild, not a crash; no temporary folders are left behind.
    first.manifest.write_text("{oops")
    again = generate_demo(tmp_path, n_scenes=20, n_text=30, n_dev=10, n_test=10, dim=16)
    assert json.loads(again.manifest.read_text())["n_text"] == 30
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert left == sorted([first.root.name, second.root.name])  # lock files are the builders'

def test_concurrent_builders_share_one_corpus(tmp_path):
    """Two processes asking at once (DDP workers) get the same, intact corpus: one builds."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        roots = pool.starmap(_gen_root, [(str(tmp_path),)] * 2)
    assert roots[0] == roots[1]
    c = generate_demo(tmp_path, n_scenes=20, n_text=30, n_dev=10, n_test=10, dim=16)
    assert c.pairs_store.is_file() and c.text_file.read_text()


def _gen_root(path):
    return str(generate_demo(path, n_scenes=20, n_text=30, n_dev=10, n_test=10, dim=16).root)


def test_bad_settings():
    with pytest.raises(ValueError, match="captions_per_scene"):
        generate_demo("/nonexistent", captions_per_scene=0)
    with pytest.raises(ValueError, match="feature_norm"):
        generate_demo("/nonexistent", feature_norm=0.0)


def test_matched_pairs_closer_than_random(pairs):
    _, b = pairs
    txt, img = _unit(b["clip_text"]), _unit(b["image"])
    sims = txt @ img.T
    matched = np.diag(sims)
    rest = sims[~np.eye(len(sims), dtype=bool)]
    assert matched.mean() > rest.mean() + 0.4
    # Each caption ranks its own image above at least 95 % of the others.
    rank_share = (sims < matched[:, None]).sum(1) / (len(sims) - 1)
    assert np.median(rank_share) > 0.99 and rank_share.min() > 0.9


def test_near_duplicate_scenes_closer_than_unrelated(pairs):
    _, b = pairs
    ids, caps = np.array(b["image_id"]), b["caption"]
    first = np.unique(ids, return_index=True)[1]  # one caption per image
    img = _unit(b["image"][first])
    sel = [caps[i] for i in first]
    overlap = np.array([[_jaccard(x, y) for y in sel] for x in sel])
    vv = img @ img.T
    off = ~np.eye(len(sel), dtype=bool)
    near, far = vv[off & (overlap >= 0.5)], vv[off & (overlap == 0)]
    assert len(near) > 20 and len(far) > 1000
    assert near.mean() > far.mean() + 0.3
    # The raw-dot threshold 0.8 (KDMCSE's score_base) masks some cross-image pairs, not most.
    dots = b["clip_text"] @ b["image"].T
    other = ids[:, None] != ids[None, :]
    share = (dots[other] > 0.8).mean()
    assert 0 < share < 0.01
    same = (ids[:, None] == ids[None, :]) & ~np.eye(len(ids), dtype=bool)
    assert (dots[same] > 0.8).mean() > 0.9  # other captions of the same image: masked


def test_paraphrases_close_in_clip_text_space(pairs):
    _, b = pairs
    ids = np.array(b["image_id"])
    txt = _unit(b["clip_text"])
    cc = txt @ txt.T
    same = (ids[:, None] == ids[None, :]) & ~np.eye(len(ids), dtype=bool)
    assert all(c1 != c2 for c1, c2 in zip(b["caption"][::2], b["caption"][1::2], strict=True))
    assert cc[same].mean() > cc[ids[:, None] != ids[None, :]].mean() + 0.5


def _read_stsb(path: Path):
    rows = [line.split("\t") for line in path.read_text().splitlines()]
    return [r[5] for r in rows], [r[6] for r in rows], np.array([float(r[4]) for r in rows])


def test_gold_scores_graded_and_follow_overlap(demo):
    s1, s2, gold = _read_stsb(demo[0].senteval_dir / "STS/STSBenchmark/sts-dev.csv")
    assert len(gold) == 200
    assert len(np.unique(gold)) >= 10 and gold.min() <= 1.0 and gold.max() >= 4.6
    assert spearmanr(gold, [_jaccard(a, b) for a, b in zip(s1, s2, strict=True)])[0] > 0.6
    sick = (demo[0].senteval_dir / "SICK/SICK_test_annotated.txt").read_text().splitlines()
    assert sick[0].startswith("pair_ID") and min(float(x.split("\t")[3]) for x in sick[1:]) >= 1.0


def test_eval_sentences_not_in_training_text(demo, pairs):
    s1, s2, _ = _read_stsb(demo[0].senteval_dir / "STS/STSBenchmark/sts-test.csv")
    train = set(demo[0].text_file.read_text().splitlines()) | set(pairs[1]["caption"])
    assert not (set(s1) | set(s2)) & train


def test_evaluate_sts_reads_demo_layout(demo):
    vocab: dict[str, int] = {}

    def bag_of_words(sentences):
        rows = [[vocab.setdefault(w, len(vocab)) for w in s.split()] for s in sentences]
        out = np.zeros((len(rows), 512))
        for i, row in enumerate(rows):
            np.add.at(out[i], row, 1.0)
        return out

    res = evaluate_sts(bag_of_words, demo[0].senteval_dir)
    assert all(np.isfinite(res[t]) for t in ALL_TASKS)
    assert res["avg"] > 50  # gold follows lexical overlap, so bag-of-words does well
    rng = np.random.default_rng(0)
    noise = evaluate_sts(lambda s: rng.normal(size=(len(s), 8)), demo[0].senteval_dir)
    assert abs(noise["avg"]) < 15


def test_minilm_far_above_chance_on_demo_stsb(demo, minilm):
    """MiniLM-L6 (masked mean pooling) scores about 93.6 on the demo STS-B test (seed 0); chance is 0."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(minilm)
    model = AutoModel.from_pretrained(minilm).eval()

    def encode_ids(input_ids, attention_mask):
        hidden = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).float()
        return (hidden * mask).sum(1) / mask.sum(1)

    # DevEvaluator on the test split: encodes only those 150 pairs (keeps this test a few seconds).
    assert DevEvaluator(demo[0].senteval_dir, tok, split="test")(encode_ids) > 80
