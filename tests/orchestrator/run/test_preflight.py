"""Issue 14: bad input that used to cost a Ray start (or train silently) is refused before Ray
starts and before any MLflow run exists, in one line naming the file or option and the fix.

Every case runs the real command line in-process, in a fresh working directory, and checks: a
non-zero exit, exactly one ``error:`` line with the expected words, Ray never initialised, and no
``mlflow.db`` or ``runs/`` written. The broken inputs are small files made from the demo corpus.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from orchestrator import ablate, search
from tests.orchestrator.refusing import refused, run_in
from trainables.data import converters as convert
from trainables.data.store import StoreMetadata, write_store

GRID = str(Path(__file__).parents[1] / "grid_tiny.py")  # MCSE vs KDMCSE with threshold 0.8


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_bert) -> Path:
    """The demo corpus, a valid profile, and each broken input of the issue's table."""
    import ray

    from trainables.data.demo_corpus import generate_demo

    ray.shutdown()  # a session left by another module would hide a Ray start here
    d = tmp_path_factory.mktemp("preflight")
    demo = generate_demo(d / "demo", dim=32)
    rng = np.random.default_rng(0)

    def store(name: str, n: int, dim_image: int, dim_text: int, image=None, text=None) -> Path:
        img = rng.standard_normal((n, dim_image)).astype(np.float32) if image is None else image
        txt = rng.standard_normal((n, dim_text)).astype(np.float32) if text is None else text
        meta = StoreMetadata("clip-a", dim_image, "clip-b", dim_text, normalized=False)
        return write_store(d / f"{name}.parquet", [f"a caption {i}" for i in range(n)],
                           [str(i) for i in range(n)], {"image": img, "clip_text": txt}, meta)

    def foreign(name: str, **columns) -> Path:
        """The demo store rewritten by another tool (no checksums), ``columns`` replaced."""
        table = pq.read_table(demo.pairs_store)
        for col, values in columns.items():
            table = table.set_column(table.column_names.index(col), col, values)
        meta = table.schema.metadata[b"mmemb"].replace(b'"page_checksums": true',
                                                       b'"page_checksums": false')
        pq.write_table(table.replace_schema_metadata({b"mmemb": meta}), d / f"{name}.parquet")
        return d / f"{name}.parquet"

    store("dims", 64, 512, 384)  # image 512-d, clip_text 384-d
    foreign("old")  # valid, but written before page checksums
    t = pq.read_table(demo.pairs_store)
    img = np.stack(t.column("image").to_numpy(zero_copy_only=False))
    img[5, 3] = np.nan
    foreign("nan_row", image=pa.FixedSizeListArray.from_arrays(pa.array(img.reshape(-1)), 32))
    caps = t.column("caption").to_pylist()
    foreign("empty_caption", caption=pa.array([*caps[:9], "", *caps[10:]], pa.string()))
    good = store("checksummed", 4000, 64, 64)
    raw = bytearray(good.read_bytes())  # 4 KB of noise in the middle, footer intact
    raw[len(raw) // 2 : len(raw) // 2 + 4096] = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
    (d / "overwritten.parquet").write_bytes(bytes(raw))
    # CLIP-like raw features: one shared direction, norms ~20 (ViT-L/14 outputs are far above 1)
    common = rng.standard_normal(32).astype(np.float32)
    clip = [20 * (common + 0.3 * rng.standard_normal((200, 32)).astype(np.float32)) / 5.7
            for _ in range(2)]
    store("big_norms", 200, 32, 32, image=clip[0], text=clip[1])
    # the same shape scaled so raw dot products centre on 0.85: 0.8 masks most negatives, not all
    scale = np.sqrt(0.85 / float(common @ common))
    most = [scale * (common + 0.3 * rng.standard_normal((200, 32)).astype(np.float32))
            for _ in range(2)]
    store("most_masked", 200, 32, 32, image=most[0], text=most[1])

    for name in ("no_dev", "empty_dev"):
        shutil.copytree(demo.senteval_dir, d / name)
    (d / "no_dev" / "STS" / "STSBenchmark" / "sts-dev.csv").unlink()
    (d / "empty_dev" / "STS" / "STSBenchmark" / "sts-dev.csv").write_text("")

    base = {"encoder": str(tiny_bert), "text_teachers": [str(tiny_bert)],
            "objective": {"teacher_weights": [1.0]}, "batch_size": 8, "max_steps": 6,
            "data": {"demo": False, "text": str(demo.text_file), "pairs": str(demo.pairs_store),
                     "senteval": str(demo.senteval_dir), "cache_dir": str(d / "cache")}}
    for name, data in {"ok": {}, "dims": {"pairs": str(d / "dims.parquet")},
                       "nan_row": {"pairs": str(d / "nan_row.parquet")},
                       "empty_caption": {"pairs": str(d / "empty_caption.parquet")},
                       "overwritten": {"pairs": str(d / "overwritten.parquet")},
                       "big_norms": {"pairs": str(d / "big_norms.parquet")},
                       "most_masked": {"pairs": str(d / "most_masked.parquet")},
                       "old": {"pairs": str(d / "old.parquet")},
                       "no_dev": {"senteval": str(d / "no_dev")},
                       "empty_dev": {"senteval": str(d / "empty_dev")}}.items():
        (d / f"{name}.yaml").write_text(yaml.safe_dump(base | {"data": base["data"] | data}))
    typo = base | {"objective": {"teacher_weights": [1.0], "lamda": 0.1}}
    (d / "typo.yaml").write_text(yaml.safe_dump(typo))
    space = Path(__file__).resolve().parents[3] / "search_spaces" / "dalr_search.py"
    (d / "teacher_typo.py").write_text(space.read_text().replace('"clip")', '"clip", "simcze")'))
    (d / "my_space.py").write_text(
        "from orchestrator.spec.spaces import FloatRange, SearchSpace\n"
        "LAM = FloatRange('objective.lam', 1e-3, 1e-1, log=True)\n"
        "SPACE = SearchSpace(name='my_space', title='lambda only', base={'objective.method': "
        "'mcse'}, define=lambda t: LAM.suggest(t) and None, baseline={'objective.method': 'mcse'})\n")
    return d


def table(files: Path, work: Path, profile: str = "ok", *extra: str) -> list[str]:
    return ["--grid", GRID, "--profile", str(files / f"{profile}.yaml"),
            "--storage", str(work / "runs"), "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}",
            *extra]


def searching(files: Path, work: Path, space: str = "kdmcse_search", *extra: str) -> list[str]:
    return ["--space", space, "--profile", str(files / "ok.yaml"), "--num-samples", "2",
            "--storage", str(work / "runs"), "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}",
            *extra]


def _gpus_beyond_this_machine() -> str:
    import torch

    return str(torch.cuda.device_count() + 2)


TABLE_CASES = [
    ("seeds-negative", "ok", ["--seeds", "-1", "0"], "argument --seeds: -1 must be an integer >= 0"),
    ("seeds-one", "ok", ["--seeds", "0"], "--seeds 0: needs at least 2 seeds"),
    ("gpus-beyond-machine", "ok", ["--gpus-per-trial", "GPUS"], "GPUs; lower it, use 0 for CPU runs"),
    ("kdmcse-dims-disagree", "dims", [], "'image' features are 512-d but 'clip_text' is 384-d"),
    ("nan-row", "nan_row", [], "column 'image': NaN/inf in row 5"),
    ("empty-caption", "empty_caption", [], "empty caption in row 9 (1 empty)"),
    ("page-overwritten", "overwritten", [], "overwritten.parquet: a page fails its checksum"),
    ("threshold-masks-all", "big_norms", [], "masks 100.0% of 4096 sampled negatives"),
    ("senteval-no-dev", "no_dev", [], "STSBenchmark not found under"),
    ("senteval-empty-dev", "empty_dev", [], "sts-dev.csv: 0 scored sentence pairs"),
    ("tracking-scheme", "ok", ["--tracking-uri", "htp://localhost:5000"],
     "--tracking-uri htp://localhost:5000: MLflow has no 'htp' store"),
    ("tracking-folder", "ok", ["--tracking-uri", "sqlite:////proc/nope/mlflow.db"],
     "--tracking-uri sqlite:////proc/nope/mlflow.db: folder /proc/nope does not exist"),
    ("yaml-typo", "typo", [], "typo.yaml: unknown setting 'objective.lamda'"),
]


@pytest.mark.parametrize("profile,extra,message", [c[1:] for c in TABLE_CASES],
                         ids=[c[0] for c in TABLE_CASES])
def test_table_refuses_before_anything_starts(profile, extra, message, files, tmp_path, capsys,
                                              monkeypatch):
    extra = [_gpus_beyond_this_machine() if a == "GPUS" else a for a in extra]
    line = refused(tmp_path, ablate.main, table(files, tmp_path, profile, *extra), message,
                   capsys, monkeypatch)
    if profile not in ("ok", "typo"):  # names the file at fault
        assert str(files) in line, line


def test_threshold_refusal_names_norms_and_fixes(files, tmp_path, capsys, monkeypatch):
    line = refused(tmp_path, ablate.main, table(files, tmp_path, "big_norms"), "mean norms",
                   capsys, monkeypatch)
    for fix in ("objective.threshold_on=cosine", "a threshold above", "objective.threshold=None"):
        assert fix in line, line


def test_threshold_masking_most_negatives_warns_in_one_line(files, tmp_path, capsys, monkeypatch):
    """Above half: allowed, said before anything starts (and repeated in the report's notes,
    tests/orchestrator/results/test_report_subset.py); above 95%: refused (above)."""
    rc, out, err = run_in(tmp_path, ablate.main, table(files, tmp_path, "most_masked", "--dry-run"),
                          capsys, monkeypatch)
    assert rc == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning: ")]
    assert len(warnings) == 1, err
    share = int(re.search(r"masks (\d+)% of 4096 sampled negatives", warnings[0]).group(1))
    assert 50 < share <= 95, warnings[0]
    for words in ("cell 'KDMCSE'", f"grounding terms learn from only the {100 - share}% left", "a threshold above",
                  "objective.threshold_on=cosine", "objective.threshold=None"):
        assert words in warnings[0], warnings[0]


def test_dry_run_lists_what_was_checked(files, tmp_path, capsys, monkeypatch):
    rc, out, _ = run_in(tmp_path, ablate.main, table(files, tmp_path, "ok", "--dry-run"), capsys,
                        monkeypatch)
    assert rc == 0, out
    checked = [ln.removeprefix("checked: ") for ln in out.splitlines() if ln.startswith("checked: ")]
    for start in ("seeds 0 1:", "run configs:", "tracking sqlite:", "storage ", "resources:",
                  "models:", "store ", "SentEval ", "cell 'KDMCSE': threshold 0.8 (dot) masks"):
        assert any(c.startswith(start) for c in checked), (start, checked)
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs").exists()


def test_store_without_checksums_runs_with_one_warning_up_front(files, tmp_path, capsys,
                                                               monkeypatch):
    """Accepted, not refused: its values are still checked, and re-converting a store can need
    source files the user no longer has; but the missing protection is said before anything."""
    rc, out, err = run_in(tmp_path, ablate.main, table(files, tmp_path, "old", "--dry-run"),
                          capsys, monkeypatch)
    assert rc == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning: ")]
    assert len(warnings) == 1 and str(files / "old.parquet") in warnings[0]
    assert "without page checksums" in warnings[0] and "re-convert" in warnings[0]
    assert any("no page checksums" in ln for ln in out.splitlines() if ln.startswith("checked: "))


SEARCH_CASES = [
    ("confirm-seeds-duplicate", "kdmcse_search", ["--confirm-seeds", "1", "1"],
     "--confirm-seeds 1 1: seeds must be distinct"),
    ("gpus-beyond-machine", "kdmcse_search", ["--gpus-per-trial", "GPUS"], "GPUs; lower it"),
    ("tracking-scheme", "kdmcse_search", ["--tracking-uri", "htp://x"], "MLflow has no 'htp' store"),
    ("unknown-teacher", "FILES/teacher_typo.py", [], "teacher combination 'simcze'"),
]


@pytest.mark.parametrize("space,extra,message", [c[1:] for c in SEARCH_CASES],
                         ids=[c[0] for c in SEARCH_CASES])
def test_search_refuses_before_anything_starts(space, extra, message, files, tmp_path, capsys,
                                               monkeypatch):
    """Refused before the study, the parent run or Ray: an unknown teacher is found although
    TPE might never sample it (every option is forced once)."""
    extra = [_gpus_beyond_this_machine() if a == "GPUS" else a for a in extra]
    argv = searching(files, tmp_path, space.replace("FILES", str(files)), *extra)
    refused(tmp_path, search.main, argv, message, capsys, monkeypatch)
    assert not list(tmp_path.iterdir())  # no study either


def test_search_takes_a_py_file_with_space(files, tmp_path, capsys, monkeypatch):
    rc, out, err = run_in(tmp_path, search.main,
                          searching(files, tmp_path, str(files / "my_space.py"), "--dry-run"),
                          capsys, monkeypatch)
    assert rc == 0, err
    assert "lambda only" in out and "dry run: everything checked, nothing started" in out
    assert not (tmp_path / "mlflow.db").exists()


def test_convert_creates_a_missing_output_folder_and_refuses_an_impossible_one(tmp_path, capsys):
    src = tmp_path / "clip.json"
    src.write_text(json.dumps({"0": {"image": "a.jpg", "captions": ["a dog", "a cat"],
                                     "image_feat": [1.0] * 8, "lang_feat": [[1.0] * 8] * 2}}))
    out = tmp_path / "new" / "deeper" / "store.parquet"
    assert convert.main(["clip-json", "--json", str(src), "--out", str(out)]) == 0
    assert out.is_file()
    assert convert.main(["clip-json", "--json", str(src), "--out", "/proc/nope/s.parquet"]) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and "--out /proc/nope/s.parquet: /proc is not a writable folder" in err
    assert "Traceback" not in err


# --- a broken search-space file breaks only the commands that use it ------------------------
@pytest.fixture
def spaces_pkg(tmp_path, monkeypatch):
    """A stand-in for search_spaces/: a valid grid and a search whose range has low > high."""
    pkg = tmp_path / "myspaces"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good_table.py").write_text(
        Path(GRID).read_text().replace('name="tiny"', 'name="good_table"'))
    (pkg / "bad_search.py").write_text(
        "from orchestrator.spec.spaces import FloatRange\n"
        "LAM = FloatRange('objective.lam', 0.5, 0.1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("orchestrator.spec.registry.PACKAGE", "myspaces")
    return pkg


def test_broken_space_file_breaks_only_its_commands(spaces_pkg, files, tmp_path, capsys,
                                                    monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    args = table(files, work, "ok", "--dry-run")
    args[1] = "good_table"
    rc, out, err = run_in(work, ablate.main, args, capsys, monkeypatch)
    assert rc == 0, err  # the table does not import the broken search
    line = refused(work, search.main, searching(files, work, "bad_search"),
                   "myspaces/bad_search.py: line 2: range objective.lam: low=0.5 > high=0.1; swap",
                   capsys, monkeypatch)
    assert "fix that file" in line
    rc, out, err = run_in(work, ablate.main, ["--list"], capsys, monkeypatch)
    assert rc == 2 and "Traceback" not in err
    assert "BROKEN  bad_search" in err and "low=0.5 > high=0.1" in err
    assert "grid    good_table" in err  # the healthy entry is still listed


def test_paper_profile_with_no_data_names_mmemb_data_and_the_fetch_first(tmp_path, capsys,
                                                                         monkeypatch):
    """A fresh machine: the first complaint is one line naming $MMEMB_DATA, the fetch command
    and what is missing (not the encoder cache, then a corpus path without $MMEMB_DATA)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    error = refused(work, ablate.main, ["--grid", "dalr_table2", "--profile", "paper", "--dry-run"],
                    f"$MMEMB_DATA={tmp_path / 'empty'} lacks what these runs read: run python -m "
                    "trainables.fetch paper", capsys, monkeypatch)
    for missing in ("wiki1m_for_simcse.txt", "senteval/downstream", "flickr30k_clip_vitl14.parquet",
                    "teachers/unsup-simcse-bert-base-uncased",
                    "the encoder bert-base-uncased (Hugging Face cache)"):
        assert missing in error, error


def test_a_profile_setting_some_cells_keep_their_own_is_noted_and_a_refused_baseline_says_where(
        files, tmp_path, capsys, monkeypatch):
    """Issue 33: a profile's objective.threshold landed silently on the MCSE baseline while the
    KDMCSE cell kept its own; its refusal then advised --cells, which always keeps the baseline."""
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"base: {files / 'ok.yaml'}\nobjective.threshold: 0.9\n")
    rc, out, err = run_in(tmp_path, ablate.main, ["--grid", GRID, "--profile", str(mine),
                                                  *table(files, tmp_path, "ok", "--dry-run")[4:]],
                          capsys, monkeypatch)
    assert rc == 0, err[-3000:]
    notes = [ln for ln in out.splitlines() if ln.startswith("note: ")]
    assert notes == ["note: objective.threshold=0.9 from profile mine: taken by MCSE; kept by "
                     "KDMCSE (0.8, cell KDMCSE)"], out[-3000:]
    big = tmp_path / "big.yaml"
    big.write_text(f"base: {files / 'big_norms.yaml'}\nobjective.threshold: 0.8\n")
    line = refused(tmp_path, ablate.main, ["--grid", GRID, "--profile", str(big),
                                           *table(files, tmp_path, "ok")[4:]],
                   "MCSE is the baseline, which runs with any --cells", capsys, monkeypatch)
    assert "objective.threshold comes from profile big" in line and "--cells '" not in line, line


def test_dry_run_says_one_array_and_one_member_in_the_singular(files, tmp_path, capsys,
                                                               monkeypatch):
    rc, out, err = run_in(tmp_path, ablate.main, table(files, tmp_path, "ok", "--dry-run", "--seeds",
                                                       "0", "1", "--array-size", "4"),
                          capsys, monkeypatch)
    assert rc == 0, err[-3000:]
    assert "in 1 array, up to" in out and "in 1 array of 4 members" in out, out
    rc, out, err = run_in(tmp_path, ablate.main, table(files, tmp_path, "ok", "--dry-run", "--seeds",
                                                       "0", "1", "--array-size", "1"),
                          capsys, monkeypatch)
    assert rc == 0, err[-3000:]
    assert "in 4 arrays of 1 member," in out, out
    assert not re.search(r"\b1 (arrays|members)\b", out), out


def test_a_setting_its_method_does_not_read_is_one_warning_and_tags_the_runs():
    """A cell sets objective.threshold_on for MCSE, whose threshold is None: the loss never reads
    it. The check says so in one line before the start; each run records it as an event, and
    its params hold only what MCSE reads (issue 38: a setting ignored by its method)."""
    from orchestrator.run.preflight import differing_settings, ignored_line
    from orchestrator.spec.grids import Cell, Grid
    from orchestrator.spec.plan import plan_runs
    from orchestrator.tracking.events import ignored_settings, resolved_run

    grid = Grid("ign", "t", (Cell("MCSE", {"objective.method": "mcse"}),
                             Cell("MCSE cos", {"objective.method": "mcse",
                                               "objective.threshold_on": "cosine"}),
                             Cell("MCSE lam", {"objective.method": "mcse",
                                               "objective.lam": 0.5})),
                baseline="MCSE", seeds=(0, 1))
    members = plan_runs(grid, "demo")
    line = ignored_line(members)
    assert line.count("objective.threshold_on") == 1 and "cell MCSE cos" in line
    assert "by method mcse in cell(s) 'MCSE cos'" in line and "lam" not in line
    cos = next(m for m in members if m.cell == "MCSE cos")
    assert ignored_settings(cos) == {"objective.threshold_on": "cell MCSE cos"}
    params, unread = resolved_run(cos.run)
    assert "threshold_on" not in params["objective"] and "objective.threshold_on" in unread
    # the profile's text teachers serve DALR; MCSE not reading them is no event
    assert not ignored_settings(next(m for m in members if m.cell == "MCSE"))
    # what the array's vmap gets as tensors: the float settings the members differ in
    assert differing_settings(members)["mcse"] == {"lam", "threshold_on"}
