"""Converters from the MCSE (txt + HDF5) and KDMCSE/DALR (CLIP JSON) layouts into a store."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

import trainables.data.converters as conv
from trainables.data.store import FeatureStore, StoreError


def _mcse_files(tmp_path, lines, feats):
    cap = tmp_path / "caps.txt"
    cap.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    h5 = tmp_path / "feats.hdf5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("features", data=feats)
    return cap, h5


def _clip_json(tmp_path, entries, name="clip.json"):
    path = tmp_path / name
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def _entries(rng, caps_per_image=(2, 3, 1), dv=5, dt=4):
    out = {}
    for k, m in enumerate(caps_per_image):
        out[f"img{k}"] = {
            "image": f"img{k}.jpg",
            "captions": [f"image {k} caption {j}" for j in range(m)],
            "image_feat": rng.standard_normal(dv).tolist(),
            "lang_feat": rng.standard_normal((m, dt)).tolist(),
        }
    return out


def test_mcse_round_trip_pairs_line_i_with_row_i(tmp_path):
    feats = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    cap, h5 = _mcse_files(tmp_path, ["  a dog runs ", "two cats", "a red car"], feats)
    out = conv.convert_mcse(cap, h5, tmp_path / "s.parquet")
    fs = FeatureStore(out)
    assert fs.metadata.image_teacher == "resnet50" and fs.metadata.image_dim == 8
    assert fs.metadata.text_teacher is None and not fs.metadata.normalized
    b = fs.batch(np.array([2, 0]))
    assert b["caption"] == ["a red car", "a dog runs"]  # stripped, as the official loader
    np.testing.assert_array_equal(b["image"], feats[[2, 0]])
    assert "clip_text" not in b


@pytest.mark.parametrize(
    "lines, feats, message",
    [
        (["a", "b"], np.zeros((3, 4), np.float32), r"2 caption lines but .*3 feature rows"),
        (["a", "", "c"], np.zeros((3, 4), np.float32), r"empty caption on line 2 \(row 1\)"),
        (["a", "b"], np.array([[0, 1.0], [np.nan, 0]], np.float32), "NaN/inf in row 1"),
        (["a", "b"], np.zeros((2, 4, 1), np.float32), r"expected \(N, D\)"),
    ],
)
def test_mcse_refuses_bad_input(tmp_path, lines, feats, message):
    cap, h5 = _mcse_files(tmp_path, lines, feats)
    with pytest.raises(StoreError, match=message):
        conv.convert_mcse(cap, h5, tmp_path / "s.parquet")
    assert not (tmp_path / "s.parquet").exists()


def test_mcse_missing_dataset_and_non_hdf5(tmp_path):
    cap = tmp_path / "c.txt"
    cap.write_text("a\n")
    h5 = tmp_path / "f.hdf5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("feats", data=np.zeros((1, 2)))
    with pytest.raises(StoreError, match="no HDF5 dataset 'features'"):
        conv.read_mcse(cap, h5)
    h5.write_text("not hdf5")
    with pytest.raises(StoreError, match="not a readable HDF5"):
        conv.read_mcse(cap, h5)


def test_clip_json_one_row_per_caption_in_key_order(tmp_path):
    entries = _entries(np.random.default_rng(1))
    out = conv.convert_clip_json(_clip_json(tmp_path, entries), tmp_path / "s.parquet")
    fs = FeatureStore(out)
    assert len(fs) == 6
    m = fs.metadata
    assert (m.image_dim, m.text_dim, m.normalized) == (5, 4, False)
    assert m.image_teacher == m.text_teacher == conv.DEFAULT_CLIP
    b = fs.batch(np.arange(6))
    expect = [(k, j) for k, e in enumerate(entries.values()) for j in range(len(e["captions"]))]
    assert b["caption"] == [f"image {k} caption {j}" for k, j in expect]
    assert b["image_id"] == [f"img{k}" for k, _ in expect]
    for row, (k, j) in enumerate(expect):
        e = entries[f"img{k}"]
        np.testing.assert_allclose(b["image"][row], e["image_feat"], rtol=1e-6)
        np.testing.assert_allclose(b["clip_text"][row], e["lang_feat"][j], rtol=1e-6)


def test_clip_json_streams_across_tiny_chunks(tmp_path, monkeypatch):
    entries = _entries(np.random.default_rng(2), caps_per_image=(1, 4, 2, 2))
    path = tmp_path / "c.json"
    path.write_text(json.dumps(entries, indent=1))
    monkeypatch.setattr(conv, "_CHUNK", 7)  # every value straddles many reads
    caps, ids, img, txt = conv.read_clip_json(path)
    expect_caps = [c for e in entries.values() for c in e["captions"]]
    assert caps == expect_caps
    assert ids == [k for k, e in entries.items() for _ in e["captions"]]
    np.testing.assert_allclose(txt, np.concatenate([e["lang_feat"] for e in entries.values()]), rtol=1e-6)
    assert img.shape == (9, 5)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda e: e["img1"]["lang_feat"].pop(), r"key 'img1': 3 captions but 2 lang_feat rows"),
        (lambda e: e["img2"].__setitem__("image_feat", [0.0] * 7), r"key 'img2': feature dims \(7, 4\)"),
        (lambda e: e["img0"]["lang_feat"][1].__setitem__(0, float("nan")), "key 'img0': NaN/inf"),
        (lambda e: e["img1"]["captions"].__setitem__(2, " "), "key 'img1': caption 2 is empty"),
        (lambda e: e["img0"].pop("lang_feat"), "key 'img0': needs"),
        (lambda e: e["img1"]["lang_feat"][0].pop(), "key 'img1': ragged"),
    ],
)
def test_clip_json_refuses_bad_entries(tmp_path, edit, message):
    entries = _entries(np.random.default_rng(3))
    edit(entries)
    path = _clip_json(tmp_path, entries)
    with pytest.raises(StoreError, match=message):
        conv.convert_clip_json(path, tmp_path / "s.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.json"]


@pytest.mark.parametrize("text", ['{"a": {"captions": [', '{"a": 1} x', "[1, 2]", '{"a" 1}', ""])
def test_clip_json_malformed_text(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(StoreError, match=r"bad\.json"):
        conv.read_clip_json(path)


def test_cli_exit_codes_and_one_line_error(tmp_path, capsys):
    entries = _entries(np.random.default_rng(4))
    good = _clip_json(tmp_path, entries)
    assert conv.main(["clip-json", "--json", str(good), "--out", str(tmp_path / "o.parquet")]) == 0
    assert len(FeatureStore(tmp_path / "o.parquet")) == 6
    capsys.readouterr()
    entries["img1"]["lang_feat"].pop()
    bad = _clip_json(tmp_path, entries, "bad.json")
    rc = conv.main(["clip-json", "--json", str(bad), "--out", str(tmp_path / "b.parquet")])
    err = capsys.readouterr().err
    assert rc != 0
    assert err.count("\n") == 1 and "bad.json" in err and "img1" in err and "Traceback" not in err
    assert not (tmp_path / "b.parquet").exists()
    rc = conv.main(["mcse", "--captions", str(tmp_path / "none.txt"), "--features", str(good),
                    "--out", str(tmp_path / "m.parquet")])
    assert rc != 0 and "none.txt: file not found" in capsys.readouterr().err


def test_module_cli_bad_input_exits_nonzero_without_traceback(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.json"
    bad.write_text('{"k": {"captions": ["a"], "image_feat": [1.0], "lang_feat": []}}')
    proc = subprocess.run(
        [sys.executable, "-m", "trainables.convert", "clip-json", "--json", str(bad),
         "--out", str(tmp_path / "o.parquet")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "key 'k'" in proc.stderr
    assert not (tmp_path / "o.parquet").exists()


# --- the paper profile's names: a release becomes the store the profile reads ------------------
def test_without_out_a_release_becomes_the_store_the_profile_reads_beside_it(tmp_path, capsys):
    from trainables.config.stores import STORES

    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    data.mkdir()
    flickr, mcse, coco = STORES["flickr30k"], STORES["flickr30k-mcse"], STORES["coco"]
    (data / mcse.source_files()[0]).write_text("a dog runs\ntwo cats\n")
    with h5py.File(data / mcse.source_files()[1], "w") as f:
        f.create_dataset("features", data=rng.standard_normal((2, 8)))
    assert conv.main(["mcse", "--captions", str(data / mcse.source_files()[0]),
                      "--features", str(data / mcse.source_files()[1])]) == 0
    assert len(FeatureStore(data / mcse.file)) == 2
    for store in (flickr, coco):
        src = _clip_json(data, _entries(rng), store.source_files()[0])
        assert conv.main(["clip-json", "--json", str(src)]) == 0
        assert len(FeatureStore(data / store.file)) == 6
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {data / s.file}" for s in (mcse, flickr, coco)]
    # the command the fetch prints names the same files
    assert conv.command(mcse) == (f"python -m trainables.convert mcse --captions $MMEMB_DATA/"
                                  f"{mcse.source_files()[0]} --features $MMEMB_DATA/"
                                  f"{mcse.source_files()[1]} --out $MMEMB_DATA/{mcse.file}")


def test_without_out_another_file_is_refused_naming_the_releases(tmp_path, capsys):
    src = _clip_json(tmp_path, _entries(np.random.default_rng(0)), "mine.json")
    assert conv.main(["clip-json", "--json", str(src)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --out is needed: mine.json is not a release "
                                               "the paper profile reads (flickr30k_ViT_L14.json; "
                                               "train_coco_ViT_L14.json)"), err
    assert list(tmp_path.glob("*.parquet")) == []


def test_a_store_is_written_with_the_users_umask_not_0600(tmp_path):
    """mkstemp makes 0600 files: a data folder a group shares (umask 002) could not read it."""
    import os
    import stat

    cap, h5 = _mcse_files(tmp_path, ["a", "b"], np.zeros((2, 4), np.float32))
    old = os.umask(0o002)
    try:
        out = conv.convert_mcse(cap, h5, tmp_path / "shared.parquet")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o664
    old = os.umask(0o077)
    try:
        out = conv.convert_mcse(cap, h5, tmp_path / "private.parquet")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
