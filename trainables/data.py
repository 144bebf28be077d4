"""Training data for one run: the text corpus, the caption+feature store, and batches on a device.

Resolves the run config's data section (or the generated demo corpus) into readers, checks that
every path exists before any model is built, and turns a schedule step into tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainables.config import RunConfig
from trainables.corpus import TextCorpus, Tokenize
from trainables.store import FeatureStore


@dataclass
class Batch:
    """One step's tensors. Pair batches also carry the stored teacher features."""

    kind: str
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    image: torch.Tensor | None = None
    clip_text: torch.Tensor | None = None
    text_teachers: tuple[torch.Tensor, ...] = ()
    """precomputed text-teacher [CLS] embeddings (store columns teacher_<name>), if any"""


@dataclass
class TrainingData:
    text: TextCorpus | None
    pairs: FeatureStore | None
    senteval_dir: Path
    image_column: str

    @property
    def n_text(self) -> int:
        return len(self.text) if self.text is not None else 0

    @property
    def n_pair(self) -> int:
        return len(self.pairs) if self.pairs is not None else 0

    @property
    def image_dim(self) -> int | None:
        return self.pairs.dim(self.image_column) if self.pairs is not None else None

    @property
    def clip_text_dim(self) -> int | None:
        if self.pairs is None or "clip_text" not in self.pairs.feature_columns:
            return None
        return self.pairs.dim("clip_text")

    def batch(
        self, kind: str, indices: np.ndarray, tokenize: Tokenize, device: torch.device,
        teacher_columns: tuple[str, ...] = (),
    ) -> Batch:
        """``teacher_columns``: store columns of precomputed text-teacher [CLS] embeddings to
        read with a pair batch (a member whose teachers were precomputed)."""
        if kind == "text":
            assert self.text is not None
            enc = tokenize(self.text.get(indices))
            # non_blocking: a blocking copy would wait for the previous step's GPU work
            return Batch(kind, enc["input_ids"].to(device, non_blocking=True),
                         enc["attention_mask"].to(device, non_blocking=True))
        assert self.pairs is not None
        rows = self.pairs.batch(indices)
        enc = tokenize(rows["caption"])

        def feat(name: str) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(rows[name])).to(device, non_blocking=True)

        clip_text = feat("clip_text") if "clip_text" in rows else None
        return Batch(
            kind, enc["input_ids"].to(device, non_blocking=True),
            enc["attention_mask"].to(device, non_blocking=True),
            image=feat(self.image_column), clip_text=clip_text,
            text_teachers=tuple(feat(c) for c in teacher_columns),
        )


def _require(path: str | None, what: str, key: str) -> Path:
    if path is None:
        raise ValueError(f"no {what} configured; set {key}=PATH or use --profile demo")
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{what} not found at {p}; fix {key} or use --profile demo")
    if p.is_dir() and key != "data.senteval":
        raise ValueError(f"{what} {p} is a directory; set {key} to the file itself")
    return p


def load_data(cfg: RunConfig) -> TrainingData:
    """Open every data source the config names, failing early with one clear line per problem."""
    d = cfg.data
    method = cfg.objective.method
    if d.demo:
        from trainables.demo_corpus import generate_demo

        demo = generate_demo(Path(d.cache_dir) / "demo", seed=d.demo_seed, dim=d.demo_dim)
        text_path, pairs_path, senteval = demo.text_file, demo.pairs_store, demo.senteval_dir
    else:
        text_path = _require(d.text, "text corpus", "data.text") if d.text else None
        pairs_path = _require(d.pairs, "pair store", "data.pairs") if method != "simcse" else None
        senteval = _require(d.senteval, "SentEval data", "data.senteval")
    if d.caption_only:
        if method == "simcse":
            raise ValueError("data.caption_only=true leaves method 'simcse' no data (it reads only "
                             "text); use a grounded method or data.caption_only=false")
        text_path = None
    text = TextCorpus(text_path) if text_path is not None else None
    pairs = FeatureStore(pairs_path) if pairs_path is not None and method != "simcse" else None
    if text is None and pairs is None:
        raise ValueError("no training data: set data.text (text corpus) and/or data.pairs (store)")
    if pairs is not None and d.image_column not in pairs.feature_columns:
        raise ValueError(
            f"store {pairs_path} has no feature column {d.image_column!r} "
            f"(has {', '.join(pairs.feature_columns)}); set data.image_column accordingly"
        )
    return TrainingData(text, pairs, Path(senteval), d.image_column)


def check_dims(cfg: RunConfig, data: TrainingData) -> None:
    """Refuse, before any model is built, a store whose features the objective cannot use."""
    o = cfg.objective.resolved()
    if o.method != "dalr" or not o.use_cma or data.image_dim is None:
        return
    from transformers import AutoConfig

    from trainables.profiles import resolve_encoder

    hidden = AutoConfig.from_pretrained(resolve_encoder(cfg.encoder)).hidden_size
    if data.image_dim != hidden:
        raise ValueError(
            f"the store's {data.image_column!r} features are {data.image_dim}-d but DALR's CMA "
            f"compares them with the student's {hidden}-d embedding; use an image teacher of "
            f"that size (CLIP ViT-L/14 is 768-d, as BERT-base) or set objective.use_cma=false"
        )
