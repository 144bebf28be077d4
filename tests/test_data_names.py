"""One name, one place: what the paper profile and the grids read under ``$MMEMB_DATA`` is what
the fetch makes or says how to make, and what the README's data section names
(``trainables/config/stores.py`` is the one table).

Every grid's and search's runs are built on the paper profile (as ``orchestrator.ablate``
builds them, without data); the fetch's instructions are read from its dry run, as a user sees
them. A store the profile reads under a name no instruction makes (or an instruction whose
``--out`` nothing reads) is the loop a user met: the dry run naming one file, the fetch another.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import pytest

from orchestrator.spec.registry import load_grid, load_space, names
from trainables import fetch
from trainables.config import stores
from trainables.config.profiles import (
    TEACHER_PARAM,
    build_config,
    paper_profile,
    teacher_overrides,
)
from trainables.data.converters import default_out

ROOT = Path(__file__).resolve().parents[1]


def _runs(name: str) -> list[dict]:
    """The overrides of every run a grid or search makes (a search: its base, its baseline and
    each text-teacher combination it draws)."""
    module = importlib.import_module(f"search_spaces.{name}")
    if hasattr(module, "GRID"):
        grid = load_grid(name)
        return [{**grid.base, **cell.overrides} for cell in grid.cells]
    space = load_space(name)
    combos = getattr(module, "TEACHERS", ())
    return [dict(space.base), dict(space.baseline),
            *({**space.base, TEACHER_PARAM: combo} for combo in combos)]


@pytest.fixture(scope="module")
def read(tmp_path_factory) -> dict[str, set[str]]:
    """name under $MMEMB_DATA -> the grids and searches whose runs read it on the paper profile
    ('profile' for the profile's own settings)."""
    root = tmp_path_factory.mktemp("data")
    mp = pytest.MonkeyPatch()
    mp.setenv("MMEMB_DATA", str(root))
    try:
        found: dict[str, set[str]] = {}

        def rel(path: str) -> str:
            return Path(path).resolve().relative_to(root.resolve()).as_posix()

        for key in ("data.text", "data.pairs", "data.senteval"):
            found.setdefault(rel(paper_profile()[key]), set()).add("profile")
        for t in paper_profile()["text_teachers"]:
            found.setdefault(rel(t), set()).add("profile")
        for name in names():
            for overrides in _runs(name):
                cfg = build_config("paper", overrides=overrides)
                paths = [cfg.data.text, cfg.data.senteval]
                paths += [cfg.data.pairs] if cfg.needs.captions else []
                paths += list(cfg.text_teachers) if cfg.needs.text_teachers else []
                for p in paths:
                    found.setdefault(rel(p), set()).add(name)
        return found
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def dry(tmp_path_factory) -> str:
    """What ``python -m trainables.fetch paper --dry-run`` prints on an empty $MMEMB_DATA."""
    import contextlib
    import io

    mp = pytest.MonkeyPatch()
    mp.setenv("MMEMB_DATA", str(tmp_path_factory.mktemp("empty") / "data"))
    mp.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            assert fetch.main(["paper", "--dry-run"]) == 0
    finally:
        mp.undo()
    return out.getvalue()


def _made_by_fetch(dry: str) -> set[str]:
    """Everything the fetch brings or an instruction makes, relative to $MMEMB_DATA."""
    root = re.search(r"\$MMEMB_DATA=(\S+),", dry).group(1)
    made = set(re.findall(r"--out \$MMEMB_DATA/(\S+)", dry))
    for where in re.findall(r"^\w[\w-]*: .* -> (.*) \[", dry, re.M):  # the items' destinations
        for part in where.split(" and "):
            path = part.split(" (")[0]
            if path.startswith(root + "/"):
                made.add(path[len(root) + 1:])
    for item in fetch.PAPER:
        if item.folder == ".":
            made |= set(item.files)
    made |= {m.made.rsplit("/config.json", 1)[0] for m in fetch.MANUAL
             if m.made and not m.command}  # a model folder brought by hand (RankCSE)
    return made - {"."}


def test_every_out_the_fetch_prints_is_read_and_every_store_read_is_made(read, dry):
    outs = set(re.findall(r"--out \$MMEMB_DATA/(\S+)", dry))
    pairs = {n for n in read if n.endswith(".parquet")}
    assert outs == pairs, (f"printed by the fetch, read by nothing: {outs - pairs}; read, made by no "
                           f"instruction: {pairs - outs}")
    assert outs == {s.file for s in stores.STORES.values()}
    missing = set(read) - _made_by_fetch(dry)
    assert not missing, f"read on the paper profile, made by no fetch item or instruction: {missing}"
    assert set(read) <= stores.read_names()


def test_the_mcse_store_is_required_where_mcse_cells_read_it_and_said_so(read, dry):
    """The instructions say which grids read each by-hand store, and it is true (READ_BY)."""
    by_key = {**{k: s.file for k, s in stores.STORES.items()},
              "rankcse": f"{stores.TEACHERS_DIR}/{stores.TEACHER_DIRS['rankcse']}"}
    for key, name in by_key.items():
        assert set(fetch.READ_BY[key]) == read[name] - {"profile"}, key
    (mcse,) = [ln for ln in dry.splitlines() if ln.startswith("  mcse-resnet [")]
    assert "[missing: flickr30k_mcse_resnet50.parquet; required: the MCSE cells" in mcse
    assert "optional" not in mcse and "table3" in mcse
    assert "kdmcse_table3" in read[stores.MCSE_STORE]  # table3's MCSE baseline reads it


def test_each_release_converts_by_default_to_the_store_the_profile_reads():
    for store in stores.STORES.values():
        given = {opt: f"/data/{name}" for opt, name in store.sources}
        assert default_out(store.convert, given) == Path("/data") / store.file


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.index("\n## ", start)
    return text[start:end]


def test_the_readme_data_section_names_the_same_files():
    section = _section((ROOT / "README.md").read_text(), "### Bring the real data")
    named = {m for m in re.findall(r"[\w-]+(?:\.[\w-]+)*\.(?:parquet|json|hdf5|txt|csv)", section)
             if m != "manifest.json"}
    table = ({stores.TEXT_FILE, *stores.MCSE_COCO_FILES}
             | {s.file for s in stores.STORES.values()}
             | {f for s in stores.STORES.values() for f in s.source_files()}
             | {s.extract[0] for s in stores.STORES.values() if s.extract})
    extracted = {s.extract[0] for s in stores.STORES.values() if s.extract}
    assert named <= table, f"the README names files the table has not: {named - table}"
    # every name but the second dataset's CSV (one extract command stands for both)
    assert table - extracted <= named, f"the table's files the README omits: {table - named}"
    for folder in (stores.SENTEVAL_DIR, *stores.TEACHER_DIRS.values()):
        assert f"{folder.rsplit('/', 1)[-1]}/" in section, folder
    mcse = stores.STORES["flickr30k-mcse"]
    assert f"--out {mcse.file}" in section and "**required**" in section


def test_the_cluster_guide_lists_the_profiles_files():
    layout = _section((ROOT / "docs" / "cluster.md").read_text(), "### Before the first")
    for name in (stores.TEXT_FILE, *(s.file for s in stores.STORES.values()), stores.SENTEVAL_DIR,
                 *(f"{stores.TEACHERS_DIR}/{d}" for d in stores.TEACHER_DIRS.values())):
        assert name in layout, name


def test_the_grids_name_the_coco_store_from_the_table():
    grid = load_grid("kdmcse_table1_coco")
    assert {c.overrides["data.pairs"] for c in grid.cells} == {stores.STORES["coco"].path}
    assert stores.STORES["coco"].path in grid.note
    assert teacher_overrides("rankcse")["text_teachers"][0].endswith(
        f"{stores.TEACHERS_DIR}/{stores.TEACHER_DIRS['rankcse']}")


# --- the chain: the MCSE instruction -> convert -> the paper dry run ------------------------------
def _paper_layout(tmp_path: Path, tiny_bert: Path) -> tuple[Path, Path]:
    """$MMEMB_DATA in the paper profile's layout for table3, stood in by small generated files
    (the demo corpus's text, CLIP-sized store and STS data), and a working folder holding the
    tiny BERT as bert-base-uncased (a local folder wins over the hub). MCSE's store is not there:
    the fetch's instruction makes it."""
    import shutil

    from trainables.data.demo_corpus import generate_demo

    data, work = tmp_path / "data", tmp_path / "work"
    demo = generate_demo(tmp_path / "demo", dim=32)
    data.mkdir()
    shutil.copy(demo.text_file, data / stores.TEXT_FILE)
    shutil.copy(demo.pairs_store, data / stores.PAPER_STORE)
    shutil.copytree(demo.senteval_dir, data / stores.SENTEVAL_DIR)
    shutil.copytree(tiny_bert, work / "bert-base-uncased")
    return data, work


def _mcse_release(captions: Path, features: Path, n: int = 300) -> None:
    """A stand-in for MCSE's released Flickr30k files, in their layout: one caption a line, and
    an HDF5 dataset ``features`` of (n, 2048) float32 ResNet-50 features, row i for line i."""
    import h5py
    import numpy as np

    rng = np.random.default_rng(0)
    words = ("a", "dog", "runs", "two", "cats", "sleep", "on", "the", "red", "sofa", "near", "water")
    captions.write_text("".join(" ".join(rng.choice(words, size=6)) + "\n" for _ in range(n)))
    with h5py.File(features, "w") as f:
        f.create_dataset("features", data=np.abs(rng.standard_normal((n, 2048))).astype(np.float32))


@pytest.mark.slow
def test_the_mcse_instruction_makes_the_store_the_paper_dry_run_reads(tmp_path, tiny_bert,
                                                                      capsys, monkeypatch):
    """fetch's MCSE instruction, followed as printed (files put where it says, its command run by
    a shell) -> python -m trainables.convert mcse -> table3 --profile paper --dry-run reads that
    store for its MCSE baseline. Before the store exists, the dry run's refusal and the fetch's
    instruction name the same file: no loop."""
    import subprocess
    import sys

    from orchestrator import ablate

    data, work = _paper_layout(tmp_path, tiny_bert)
    env = {**os.environ, "MMEMB_DATA": str(data), "HF_ENDPOINT": "http://127.0.0.1:9",
           "PYTHONPATH": str(ROOT)}
    monkeypatch.setenv("MMEMB_DATA", str(data))
    monkeypatch.chdir(work)
    argv = ["--grid", "table3", "--profile", "paper", "--dry-run", "--explain", "--storage",
            str(work / "runs"), "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}"]
    assert ablate.main(argv) == 2
    (refusal,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error: ")]
    assert f"missing: {stores.MCSE_STORE}" in refusal and "trainables.fetch paper" in refusal

    shown = subprocess.run([sys.executable, "-m", "trainables.fetch", "paper", "--dry-run",
                            "--only", "mcse-resnet"], env=env, capture_output=True, text=True,
                           cwd=work, timeout=600)
    assert shown.returncode == 0, shown.stderr
    (line,) = [ln for ln in shown.stdout.splitlines() if ln.startswith("  mcse-resnet [")]
    put = re.search(r"; put it at (.*?); then: ", line).group(1)
    captions, features = (data / n for n in re.findall(r"\$MMEMB_DATA/([\w.-]+)", put))
    command = line.split("; then: ", 1)[1]
    assert command.endswith(f"--out $MMEMB_DATA/{stores.MCSE_STORE}")  # what the refusal named
    _mcse_release(captions, features)
    made = subprocess.run(["bash", "-c", command.replace("python ", f"{sys.executable} ", 1)],
                          env=env, capture_output=True, text=True, cwd=work, timeout=600)
    assert made.returncode == 0 and made.stdout.strip() == f"wrote {data / stores.MCSE_STORE}", \
        made.stdout + made.stderr

    assert ablate.main(argv) == 0
    out = capsys.readouterr().out
    assert "dry run: everything checked, nothing started" in out, out[-3000:]
    lines = out.splitlines()
    pairs = {lines[i - 1].split(" (seeds")[0]: ln.rsplit("; pairs ", 1)[1]  # cell -> its store
             for i, ln in enumerate(lines) if ln.startswith("  run: ")}
    assert pairs == {"MCSE": str(data / stores.MCSE_STORE),
                     **dict.fromkeys(("KDMCSE", "without AdapACSE", "without threshold filtering"),
                                     str(data / stores.PAPER_STORE))}, pairs
    assert re.search(rf"^  data\.pairs +{re.escape(str(data / stores.MCSE_STORE))} +recipe mcse "
                     r"\(paper\): its official store$", out, re.M), out[-3000:]
    shown = subprocess.run([sys.executable, "-m", "trainables.fetch", "paper", "--only",
                            "mcse-resnet"], env=env, capture_output=True, text=True, cwd=work,
                           timeout=600)
    assert f"mcse-resnet [present: {stores.MCSE_STORE}" in shown.stdout, shown.stdout
