"""``python -m trainables.extract --column resnet``: DALR Table 9's ResNet column added to a
store from the images its rows name (a tiny random ResNet the test writes; no hub), each image
embedded once and given to every caption of it; run again, nothing to do; bad input one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainables.data.clip_extraction import main
from trainables.data.store import FeatureStore, StoreMetadata, write_store


@pytest.fixture(scope="module")
def tiny_resnet(tmp_path_factory) -> Path:
    from trainables.testing import make_tiny_resnet

    return make_tiny_resnet(tmp_path_factory.mktemp("tiny-resnet"), dim=12)


def _store(tmp_path: Path) -> Path:
    """Three images, two captions each (image ids without .jpg for two of them, as a converted
    JSON may name them), and their images."""
    from PIL import Image

    rng = np.random.default_rng(0)
    images = tmp_path / "images"
    images.mkdir()
    ids = ["100", "101", "102.jpg"]
    for i in ids:
        name = i if i.endswith(".jpg") else f"{i}.jpg"
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(images / name)
    rows = [i for i in ids for _ in range(2)]
    feats = rng.standard_normal((len(rows), 8)).astype(np.float32)
    meta = StoreMetadata("clip", 8, "clip", 8, normalized=False)
    return write_store(tmp_path / "s.parquet", [f"caption {k}" for k in range(len(rows))], rows,
                       {"image": feats, "clip_text": feats}, meta)


def test_the_column_is_added_once_per_image_and_a_rerun_does_nothing(tmp_path, tiny_resnet,
                                                                     capsys):
    store = _store(tmp_path)
    argv = ["--images", str(tmp_path / "images"), "--model", str(tiny_resnet), "--column",
            "resnet", "--out", str(store), "--no-progress"]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == f"added column resnet (12-d, 3 images) to {store}"
    s = FeatureStore(store, cache_dir=tmp_path / "cache")
    assert s.feature_columns == ("image", "clip_text", "resnet") and s.dim("resnet") == 12
    r = s.column("resnet")
    assert np.array_equal(r[0], r[1]) and not np.array_equal(r[0], r[2])  # per image
    assert s.metadata.extra["resnet"]["model"] == str(tiny_resnet)
    before = store.stat().st_mtime_ns
    assert main(argv) == 0
    assert "already has column resnet (12-d); nothing to do" in capsys.readouterr().out
    assert store.stat().st_mtime_ns == before


def test_bad_input_is_one_line_and_the_store_is_untouched(tmp_path, tiny_resnet, tiny_clip,
                                                          capsys):
    store = _store(tmp_path)
    (tmp_path / "images" / "101.jpg").unlink()
    before = store.read_bytes()
    base = ["--images", str(tmp_path / "images"), "--column", "resnet", "--out", str(store),
            "--no-progress"]
    for argv, words in (
            ([*base, "--model", str(tiny_resnet)], "no image file for image id '101'"),
            ([*base, "--model", str(tiny_clip)], "is CLIP: a CLIP store is made without --column"),
            (base, "--column needs --model"),
            ([*base, "--model", str(tiny_resnet), "--pairs", "x.csv"], "drop --pairs"),
            (["--images", str(tmp_path), "--out", str(store)], "--pairs is required")):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 2 and words in err and len(err.strip().splitlines()) == 1, (argv, err)
        assert "Traceback" not in err
    assert store.read_bytes() == before


def test_a_store_without_the_resnet_column_names_the_command_that_adds_it(tmp_path):
    """What the paper dry run says for a ResNet cell of DALR Table 9 before the column exists."""
    from trainables.config.run_config import RunConfig
    from trainables.data.batches import load_data

    store = _store(tmp_path)
    (tmp_path / "text.txt").write_text("a sentence\nanother one\n")
    (tmp_path / "senteval").mkdir()
    cfg = RunConfig().with_overrides({
        "objective.method": "mcse", "data.image_column": "resnet", "data.pairs": str(store),
        "data.text": str(tmp_path / "text.txt"), "data.senteval": str(tmp_path / "senteval")})
    with pytest.raises(ValueError) as err:
        load_data(cfg)
    line = str(err.value)
    assert f"store {store} has no feature column 'resnet'" in line and \
        f"--model microsoft/resnet-50 --column resnet --out {store}" in line and \
        "--only flickr30k-resnet says where the images come from" in line, line
