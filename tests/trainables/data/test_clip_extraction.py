"""CLIP extraction job: features equal direct CLIPModel calls, resume, and bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from trainables.data.clip_extraction import (
    ExtractConfig,
    ExtractError,
    _fingerprint,
    _read_valid_shard,
    main,
    plan_shards,
    read_pairs,
    run_extract,
)
from trainables.data.store import FeatureStore

# Rows interleave images so the join (image feature -> each of its captions) and the row order
# are both exercised; img3 has one caption, img0 three.
ROWS = [
    ("img0.png", "a dog runs on the grass"),
    ("img1.png", "two people sit at a table"),
    ("img0.png", "a black dog plays with a ball"),
    ("sub/img2.png", "a red car on the street"),
    ("img1.png", "a group of people in a kitchen"),
    ("img3.png", "a boat on the water"),
    ("img0.png", "the dog is happy"),
    ("img4.png", "a girl rides a bike in the park"),
    ("sub/img2.png", "an old car near a house"),
    ("img5.png", "a man holds a guitar at night"),
    ("img4.png", "a young girl on a bike"),
]


@pytest.fixture(scope="module")
def ray_light():
    import ray

    from trainables.runtime.ray_env import init_ray

    init_ray(num_cpus=2, log_to_driver=False)  # a fresh local instance, light settings
    yield
    ray.shutdown()


def _write_csv(path: Path, rows) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["image", "caption"])
        w.writerows(rows)
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from PIL import Image

    root = tmp_path_factory.mktemp("pairs")
    rng = np.random.default_rng(0)
    for name in sorted({r[0] for r in ROWS}):
        (root / "images" / name).parent.mkdir(parents=True, exist_ok=True)
        # Not square and not 32 px, so the processor really resizes and crops.
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(root / "images" / name)
    _write_csv(root / "captions.csv", ROWS)
    return root


@pytest.fixture(scope="module")
def reference(tiny_clip):
    """Direct CLIPModel calls, one image / one caption at a time (no batching, no Ray)."""
    from PIL import Image
    from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel

    model = CLIPModel.from_pretrained(tiny_clip).eval()
    proc = AutoImageProcessor.from_pretrained(tiny_clip, backend="pil")
    tok = AutoTokenizer.from_pretrained(tiny_clip)

    def image(path: Path) -> np.ndarray:
        with torch.no_grad():
            px = proc(images=[Image.open(path).convert("RGB")], return_tensors="pt")["pixel_values"]
            return model.visual_projection(model.vision_model(pixel_values=px).pooler_output)[0].numpy()

    def text(caption: str) -> np.ndarray:
        with torch.no_grad():
            t = tok([caption], return_tensors="pt")
            pooled = model.text_model(input_ids=t["input_ids"], attention_mask=t["attention_mask"]).pooler_output
            return model.text_projection(pooled)[0].numpy()

    return image, text


@pytest.fixture(scope="module")
def one_shot(ray_light, data, tiny_clip, tmp_path_factory) -> Path:
    """The CLI run in one go (shared by the feature check and the resume check)."""
    out = tmp_path_factory.mktemp("one-shot") / "store.parquet"
    rc = main([
        "--pairs", str(data / "captions.csv"), "--images", str(data / "images"), "--model", str(tiny_clip),
        "--out", str(out), "--batch-size", "5", "--shard-size", "4", "--no-progress",
    ])
    assert rc == 0
    return out


def test_one_shot_matches_direct_clip(one_shot, data, tiny_clip, reference):
    image, text = reference
    store = FeatureStore(one_shot)
    assert len(store) == len(ROWS)
    b = store.batch(np.arange(len(ROWS)))
    assert b["caption"] == [c for _, c in ROWS] and b["image_id"] == [i for i, _ in ROWS]
    want_img = np.stack([image(data / "images" / i) for i, _ in ROWS])
    want_txt = np.stack([text(c) for _, c in ROWS])
    np.testing.assert_allclose(b["image"], want_img, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b["clip_text"], want_txt, rtol=1e-5, atol=1e-5)
    # raw, unnormalised features, as the official preprocess.py stored them
    assert not np.allclose(np.linalg.norm(b["image"], axis=1), 1.0)
    m = store.metadata
    assert (m.image_teacher, m.image_dim, m.text_dim, m.normalized) == (str(tiny_clip), 16, 16, False)
    assert not Path(str(one_shot) + ".work").exists()  # merged shards are cleaned up


@pytest.mark.slow  # two extraction runs: ~20 s; the data chain's join runs it
def test_resume_computes_only_the_rest(ray_light, one_shot, data, tiny_clip, tmp_path):
    cfg = ExtractConfig(
        pairs=data / "captions.csv", images=data / "images", model=str(tiny_clip),
        out=tmp_path / "store.parquet", work_dir=tmp_path / "work", batch_size=3, shard_size=3,
        keep_shards=True, progress=False,
    )
    # 6 unique images; packing by image with >= 3 pairs per shard: {img0}, {img1,img2}, {img3,img4}, {img5}
    total = 4
    first = run_extract(ExtractConfig(**{**cfg.__dict__, "max_shards": 2}))
    assert first.out is None and not cfg.out.exists()
    assert (first.shards_total, first.shards_skipped, first.shards_computed) == (total, 0, 2)
    parts = sorted((tmp_path / "work" / "shards").glob("part-*.parquet"))
    assert [p.name for p in parts] == ["part-00000.parquet", "part-00001.parquet"]
    stamps = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in parts}

    second = run_extract(cfg)
    assert (second.shards_skipped, second.shards_computed) == (2, total - 2)
    # shards 2 and 3 hold img3 (1 caption) + img4 (2) and img5 (1): 3 images + 4 captions
    assert second.items_computed == 3 + 4
    assert all((p.stat().st_ino, p.stat().st_mtime_ns) == stamps[p] for p in parts)  # untouched

    # equals the one-shot run (which used other shard and batch sizes)
    a, b = FeatureStore(second.out), FeatureStore(one_shot)
    ba, bb = a.batch(np.arange(len(a))), b.batch(np.arange(len(b)))
    assert ba["caption"] == bb["caption"] and ba["image_id"] == bb["image_id"]
    for col in ("image", "clip_text"):
        np.testing.assert_allclose(ba[col], bb[col], rtol=1e-5, atol=1e-6)
    assert a.metadata == b.metadata


def test_invalid_shards_are_recomputed(data, tmp_path):
    """A truncated part file or one from other input is not reused (checked without Ray)."""
    pairs = read_pairs(data / "captions.csv")
    s = plan_shards(pairs.images, 3)[0]
    fp = _fingerprint(s, pairs.images, pairs.captions, "m")
    from trainables.data.clip_extraction import _write_shard

    path = tmp_path / "part-00000.parquet"
    n = len(s.rows)
    _write_shard(path, np.asarray(s.rows), np.ones((n, 4)), np.ones((n, 4)), fp)
    assert _read_valid_shard(path, fp, n) is not None
    assert _read_valid_shard(path, _fingerprint(s, pairs.images, pairs.captions, "other-model"), n) is None
    path.write_bytes(path.read_bytes()[:50])
    assert _read_valid_shard(path, fp, n) is None


def test_plan_shards_keeps_each_image_in_one_shard(data):
    images = read_pairs(data / "captions.csv").images
    shards = plan_shards(images, 3)
    assert sorted(r for s in shards for r in s.rows) == list(range(len(ROWS)))
    owner = {name: s.index for s in shards for name in s.images}
    assert len(owner) == len(set(images)) == sum(len(s.images) for s in shards)
    assert all(owner[images[r]] == s.index for s in shards for r in s.rows)


def test_jsonl_equals_csv(data, tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps({"image": i, "caption": c}) for i, c in ROWS) + "\n")
    a, b = read_pairs(path), read_pairs(data / "captions.csv")
    assert (a.images, a.captions) == (b.images, b.captions)


@pytest.mark.parametrize(
    ("rows", "header", "match"),
    [
        ([("img0.png", "ok"), ("img9.png", "a cat")], ["image", "caption"], r"captions\.csv:3: image 'img9\.png' not found"),
        ([("img0.png", "ok"), ("img1.png", "  ")], ["image", "caption"], r"captions\.csv:3: empty caption"),
        ([("img0.png", "ok")], ["image_name", "comment"], r"expected columns 'image' and 'caption'"),
        ([("img0.png", "a dog, running", "extra")], ["image", "caption"], r"captions\.csv:2: wrong number of fields"),
    ],
)
def test_bad_pairs_fail_before_compute(data, tiny_clip, tmp_path, rows, header, match):
    path = tmp_path / "captions.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    cfg = ExtractConfig(pairs=path, images=data / "images", model=str(tiny_clip), out=tmp_path / "s.parquet")
    with pytest.raises(ExtractError, match=match) as err:
        run_extract(cfg)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "s.parquet").exists() and not (tmp_path / "s.parquet.work").exists()


def test_bad_jsonl_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"image": "a.png", "caption": "x"}\n{"image": "b.png", "caption": \n')
    with pytest.raises(ExtractError, match=r"p\.jsonl:2: not valid JSON"):
        read_pairs(path)


def test_cli_reports_one_line(tmp_path, capsys):
    assert main(["--pairs", str(tmp_path / "nope.csv"), "--images", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "nope.csv: pairs file not found" in err and "\n" not in err


def test_unreadable_image_names_file_and_row(ray_light, data, tiny_clip, tmp_path):
    import shutil

    images = tmp_path / "images"
    shutil.copytree(data / "images", images)
    (images / "img3.png").write_bytes(b"not a png")
    cfg = ExtractConfig(
        pairs=data / "captions.csv", images=images, model=str(tiny_clip), out=tmp_path / "s.parquet",
        shard_size=3, progress=False,
    )
    # img3.png is data line 7 of the CSV (header = line 1)
    with pytest.raises(ExtractError, match=r"captions\.csv:7: image .*img3\.png: unreadable image") as err:
        run_extract(cfg)
    assert "\n" not in str(err.value)
    assert not cfg.out.exists()


@pytest.mark.parametrize("over, words", [
    ({"num_gpus_per_actor": 8}, ["--num-gpus-per-actor 8", "has 0 GPUs", "--address"]),
    ({"num_cpus_per_actor": 64}, ["--num-cpus-per-actor 64", "has 2 CPUs", "lower it"]),
    ({"num_actors": 3}, ["--num-actors 3", "needs 3 CPUs", "use --num-actors 2"]),
    ({"num_actors": 0}, ["--num-actors 0", "1 or more"]),
    ({"num_cpus_per_actor": -1}, ["negative"]),
])
def test_impossible_actor_pool_is_refused(over, words, tmp_path):
    from trainables.data.clip_extraction import ExtractConfig, ExtractError, check_resources

    cfg = ExtractConfig(pairs=tmp_path / "p.csv", images=tmp_path, model="m",
                        out=tmp_path / "o.parquet", **over)
    with pytest.raises(ExtractError) as err:
        check_resources(cfg, {"CPU": 2.0})
    assert all(w in str(err.value) for w in words), str(err.value)
    check_resources(ExtractConfig(pairs=tmp_path / "p.csv", images=tmp_path, model="m",
                                  out=tmp_path / "o.parquet", num_actors=2,
                                  num_gpus_per_actor=0.5), {"CPU": 2.0, "GPU": 1.0})
