"""Demo world: deterministic and cached, and each documented mechanism is there to act on.

The mechanisms (trainables/data/demo_corpus.py docstring): words are aliases of concepts that only the
teacher features resolve; near-duplicate scenes fill caption batches, so the 0.8 raw-dot filter
masks some negatives, not none or all; teacher cosines track the scenes' similarity as the gold
does; the untrained demo student starts well below the ceiling.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from trainables.data import demo_corpus
from trainables.data.demo_corpus import (
    ALIASES,
    SLOTS,
    generate_demo,
    lexicon_oracle,
    parse_scene,
    scene_similarity,
)
from trainables.data.store import FeatureStore
from trainables.evaluation.sts import ALL_TASKS, evaluate_sts, load_stsb


def _files(root: Path) -> dict[str, bytes]:
    """Every generated file; hidden ones (the store reader's own .mmemb-cache) are not the corpus."""
    paths = [p for p in sorted(root.rglob("*")) if p.is_file()]
    return {str(p.relative_to(root)): p.read_bytes() for p in paths if not p.relative_to(root).parts[0].startswith(".")}


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    start = time.perf_counter()
    corpus = generate_demo(tmp_path_factory.mktemp("demo"), dim=384)
    return corpus, time.perf_counter() - start


@pytest.fixture(scope="module")
def pairs(demo):
    store = FeatureStore(demo[0].pairs_store)
    rows = store.batch(np.arange(len(store)))
    rows["scene"] = [parse_scene(c) for c in rows["caption"]]
    return store, rows


def test_fast_and_sized(demo, pairs):
    corpus, seconds = demo
    assert seconds < 5.0
    store, rows = pairs
    assert len(store) == 800 and len(set(rows["image_id"])) == 400
    assert store.dim("image") == store.dim("clip_text") == 384
    assert store.metadata.normalized is False
    lines = corpus.text_file.read_text().splitlines()
    assert len(lines) == 2000 == len(set(lines)) and all(line.strip() for line in lines)
    # Unnormalised, at the documented scale (about feature_norm = 1.25, with jitter).
    norms = np.linalg.norm(rows["image"], axis=1)
    assert 1.15 < norms.mean() < 1.35 and norms.std() > 0.01
    assert json.loads(corpus.manifest.read_text())["seed"] == 0


def test_deterministic_bytes_and_seed_changes_everything(tmp_path, demo):
    again = generate_demo(tmp_path / "again", dim=384)
    assert _files(again.root) == _files(demo[0].root)  # same seed: byte-identical files
    other = generate_demo(tmp_path / "other", seed=1, dim=384)
    assert other.text_file.read_text() != again.text_file.read_text()
    a = FeatureStore(other.pairs_store).column("image")
    b = FeatureStore(again.pairs_store).column("image")
    assert a.shape == b.shape and not np.allclose(a, b)
    assert (other.senteval_dir / "STS/STSBenchmark/sts-test.csv").read_bytes() != (
        again.senteval_dir / "STS/STSBenchmark/sts-test.csv"
    ).read_bytes()


def test_cache_is_reused_and_keyed_by_settings(tmp_path, monkeypatch):
    small = dict(n_scenes=20, n_text=30, n_dev=10, n_test=10, dim=16)
    first = generate_demo(tmp_path, **small)

    def boom(*args, **kwargs):
        raise AssertionError("regenerated although the cache matched")

    monkeypatch.setattr(demo_corpus, "_build", boom)
    assert generate_demo(tmp_path, **small) == first
    monkeypatch.undo()
    second = generate_demo(tmp_path, **{**small, "n_text": 31})
    assert second.root != first.root and first.manifest.exists()
    assert f"demo-v{demo_corpus.VERSION}-" in first.root.name
    # A damaged manifest means a rebuild, not a crash; no temporary folders are left behind.
    first.manifest.write_text("{oops")
    again = generate_demo(tmp_path, **small)
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
    with pytest.raises(ValueError, match="family"):
        generate_demo("/nonexistent", family=0)
    with pytest.raises(ValueError, match="2 time concepts"):
        parse_scene("a young dog is running on the beach at night in the rain .")


def test_words_are_aliases_only_teachers_resolve(demo, pairs):
    """A caption names a concept by one of several words; the text gives no hint which words
    share a concept (each slot is drawn independently), the teacher features do."""
    _, rows = pairs
    assert all(len(words) >= 2 for slot in SLOTS for words in ALIASES[slot].values())
    # The two captions of an image usually differ in their words for the same concepts.
    caps = rows["caption"]
    differ = [set(a.split()) != set(b.split()) for a, b in zip(caps[::2], caps[1::2], strict=True)]
    assert all(rows["image_id"][i] == rows["image_id"][i + 1] for i in range(0, len(caps), 2))
    assert np.mean(differ) > 0.9
    # Same scene, different words: the CLIP-text features stay close, far closer than other scenes.
    txt = _unit(rows["clip_text"])
    ids = np.asarray(rows["image_id"])
    same = (ids[:, None] == ids[None, :]) & ~np.eye(len(ids), dtype=bool)
    cc = txt @ txt.T
    assert cc[same].mean() > np.median(cc[ids[:, None] != ids[None, :]]) + 0.4
    # STS: words alone score low, the lexicon (what grounding can teach) scores near the ceiling.
    vocab: dict[str, int] = {}

    def bag_of_words(sentences):
        out = np.zeros((len(sentences), 1024))
        for i, s in enumerate(sentences):
            np.add.at(out[i], [vocab.setdefault(w, len(vocab)) for w in s.split()], 1.0)
        return out

    assert evaluate_sts(bag_of_words, demo[0].senteval_dir)["avg"] < 50
    assert evaluate_sts(lexicon_oracle, demo[0].senteval_dir)["avg"] > 95


def test_near_duplicates_give_the_filter_something_to_mask(pairs):
    _, rows = pairs
    img, txt, scenes = rows["image"], rows["clip_text"], rows["scene"]
    rng = np.random.default_rng(0)
    off = ~np.eye(16, dtype=bool)
    shares, near, masked_sim, kept_sim = [], [], [], []
    for _ in range(200):
        ix = rng.choice(len(scenes), 16, replace=False)
        hit = (txt[ix] @ img[ix].T > 0.8) & off  # KDMCSE's filter on raw dot products
        sim = np.array([[scene_similarity(scenes[i], scenes[j]) for j in ix] for i in ix])
        shares.append(hit[off].mean())
        near.append(((sim >= 0.7) & off).any())
        masked_sim += sim[hit].tolist()
        kept_sim += sim[off & ~hit].tolist()
    assert np.mean(near) > 0.8  # most caption batches hold a near-duplicate scene
    assert 0.02 < np.mean(shares) < 0.15  # neither ~0 nor ~all of the negatives
    assert np.mean(masked_sim) > 0.55 > 0.3 > np.mean(kept_sim)
    # Other captions of the same image are always over the threshold.
    ids = np.asarray(rows["image_id"])
    same = (ids[:, None] == ids[None, :]) & ~np.eye(len(ids), dtype=bool)
    assert ((txt @ img.T)[same] > 0.8).mean() > 0.95


def test_teacher_similarity_tracks_the_scene_like_the_gold(demo, pairs):
    _, rows = pairs
    first = np.unique(rows["image_id"], return_index=True)[1][:200]
    truth = np.array([[scene_similarity(rows["scene"][i], rows["scene"][j]) for j in first] for i in first])
    tri = np.triu_indices(len(first), 1)
    for column in ("image", "clip_text"):
        u = _unit(rows[column][first])
        assert spearmanr((u @ u.T)[tri], truth[tri])[0] > 0.85, column
    dev = load_stsb(demo[0].senteval_dir, "dev")
    sims = [scene_similarity(parse_scene(a), parse_scene(b)) for a, b in zip(dev.sent1, dev.sent2, strict=True)]
    assert spearmanr(dev.gold, sims)[0] > 0.95
    # A caption's own image is its nearest for most captions (grounding is learnable).
    cv = _unit(rows["clip_text"]) @ _unit(rows["image"]).T
    assert (np.diag(cv) >= cv.max(1) - 1e-6).mean() > 0.5


def test_gold_graded(demo):
    dev = load_stsb(demo[0].senteval_dir, "dev")
    assert len(dev.gold) == 200
    assert len(np.unique(dev.gold)) >= 15 and dev.gold.min() <= 0.6 and dev.gold.max() >= 4.6
    sick = (demo[0].senteval_dir / "SICK/SICK_test_annotated.txt").read_text().splitlines()
    assert sick[0].startswith("pair_ID") and min(float(x.split("\t")[3]) for x in sick[1:]) >= 1.0


def test_eval_scenes_not_in_training(demo, pairs):
    test = load_stsb(demo[0].senteval_dir, "test")
    train_scenes = set(pairs[1]["scene"]) | {parse_scene(s) for s in demo[0].text_file.read_text().splitlines()}
    assert not {parse_scene(s) for s in (*test.sent1, *test.sent2)} & train_scenes


def test_evaluate_sts_reads_demo_layout(demo):
    res = evaluate_sts(lexicon_oracle, demo[0].senteval_dir)
    assert all(np.isfinite(res[t]) for t in ALL_TASKS)
    rng = np.random.default_rng(0)
    noise = evaluate_sts(lambda s: rng.normal(size=(len(s), 8)), demo[0].senteval_dir)
    assert abs(noise["avg"]) < 15


def test_demo_student_starts_well_below_the_ceiling(demo, minilm, tmp_path):
    """The demo student (MiniLM-L6's last layer on its embeddings), [CLS] as training evaluates it:
    informative (not a constant vector) but far from the lexicon oracle."""
    from trainables.evaluation.sts import DevEvaluator
    from trainables.models.pretrained import MINILM_TOP1, resolve_encoder
    from trainables.models.student import Student, StudentConfig

    path = Path(resolve_encoder(MINILM_TOP1, tmp_path))
    assert path.is_relative_to(tmp_path) and resolve_encoder(MINILM_TOP1, tmp_path) == str(path)
    student = Student(StudentConfig(encoder=str(path), method="simcse"))
    assert student.encoder.config.num_hidden_layers == 1
    emb = _unit(student.encode(demo[0].text_file.read_text().splitlines()[:32]).numpy())
    assert (emb @ emb.T)[~np.eye(32, dtype=bool)].min() < 0.95
    score = DevEvaluator(demo[0].senteval_dir, student.tokenizer, split="test")(student.encode_ids)
    assert 45 < score < 80
