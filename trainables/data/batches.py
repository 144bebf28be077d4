"""Training data for one run: the text corpus, the caption+feature store, and batches on a device.

Resolves the run config's data section (or the generated demo corpus) into readers, checks that
every path exists before any model is built, and turns a schedule step into tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainables.config.run_config import RunConfig
from trainables.data.corpus import TextCorpus, Tokenize
from trainables.data.filter_stats import NEARLY_ALL, FilterSample, sample_filter
from trainables.data.store import FeatureStore
from trainables.objectives.methods import StoreView, method_of


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
    image_rows: np.ndarray | None = None
    """``data.shuffle_images``: row whose image feature each row gets (None: its own)"""
    transfer_dir: Path | None = None
    """SentEval folder of the transfer tasks, evaluated when ``RunConfig.transfer`` is set: the
    STS folder, or on the demo profile ``data.senteval`` (None when unset: not evaluated)"""

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
        if self.image_rows is not None:
            rows[self.image_column] = self.pairs.batch(self.image_rows[indices])[self.image_column]
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
    captions = cfg.needs.captions  # a text-only method (SimCSE) opens no store
    if d.demo:
        from trainables.data.demo_corpus import generate_demo

        demo = generate_demo(Path(d.cache_dir) / "demo", seed=d.demo_seed, dim=d.demo_dim)
        text_path, pairs_path, senteval = demo.text_file, demo.pairs_store, demo.senteval_dir
    else:
        text_path = _require(d.text, "text corpus", "data.text") if d.text else None
        pairs_path = _require(d.pairs, "pair store", "data.pairs") if captions else None
        senteval = _require(d.senteval, "SentEval data", "data.senteval")
    if d.caption_only:
        if not captions:
            raise ValueError(f"data.caption_only=true leaves method {method!r} no data (it reads "
                             "only text); use a grounded method or data.caption_only=false")
        text_path = None
    text = TextCorpus(text_path) if text_path is not None else None
    pairs = FeatureStore(pairs_path) if pairs_path is not None and captions else None
    if text is None and pairs is None:
        raise ValueError("no training data: set data.text (text corpus) and/or data.pairs (store)")
    if pairs is not None and d.image_column not in pairs.feature_columns:
        from trainables.config.stores import RESNET_COLUMN, RESNET_MODEL

        fix = (f"add it: python -m trainables.extract --images IMAGES --model {RESNET_MODEL} "
               f"--column {RESNET_COLUMN} --out {pairs_path} (python -m trainables.fetch paper "
               "--only flickr30k-resnet says where the images come from)"
               if d.image_column == RESNET_COLUMN else "set data.image_column accordingly")
        raise ValueError(
            f"store {pairs_path} has no feature column {d.image_column!r} "
            f"(has {', '.join(pairs.feature_columns)}); {fix}"
        )
    image_rows = _shuffled_image_rows(pairs) if d.shuffle_images and pairs is not None else None
    transfer_dir = Path(senteval)
    if d.demo:  # the demo's STS data is generated; transfer tasks need the real SentEval folder
        transfer_dir = _require(d.senteval, "SentEval data", "data.senteval") if d.senteval else None
    return TrainingData(text, pairs, Path(senteval), d.image_column, image_rows, transfer_dir)


def _shuffled_image_rows(pairs: FeatureStore) -> np.ndarray:
    """For each row, a row of another image: image ids permuted as a derangement (fixed seed, so
    every run of a grid sees the same broken pairing and only the training seed varies)."""
    uniq, first, inverse = np.unique(pairs.image_ids(), return_index=True, return_inverse=True)
    if len(uniq) < 2:
        raise ValueError("data.shuffle_images needs a store with at least two images")
    perm = np.random.default_rng(0).permutation(len(uniq))
    perm = np.roll(perm, 1)[np.argsort(perm)]  # image perm[k] -> perm[k+1]: no fixed point
    return first[perm[inverse]]


def check_batch_fits(cfg: RunConfig, data: TrainingData) -> None:
    """A batch larger than the data it is drawn from would hold the whole source instead (the
    batch stream cannot draw more rows than there are): fewer in-batch negatives than
    ``batch_size`` says, so a different contrastive task. Refused before anything starts
    (``orchestrator.run.preflight``, ``trainables.train``), naming the source and its size;
    not in :func:`check_dims`, which the trainer also calls on stand-in data (bench/)."""
    sources = []
    if data.text is not None:
        sources.append((data.n_text, "sentences of", "the generated demo corpus" if cfg.data.demo
                        else f"the text corpus {getattr(data.text, 'path', cfg.data.text)}"))
    if data.pairs is not None:
        sources.append((data.n_pair, "caption-image pairs of", "the generated demo corpus"
                        if cfg.data.demo else f"the store {data.pairs.path}"))
    for rows, what, where in sorted(sources):  # the smallest source bounds the batch
        if cfg.batch_size > rows:
            raise ValueError(
                f"batch_size={cfg.batch_size} is larger than the {rows} {what} {where}: a batch "
                f"would hold only those {rows} rows, so fewer in-batch negatives than asked; set "
                f"batch_size={rows} or less, or train on more data")


def check_dims(cfg: RunConfig, data: TrainingData) -> None:
    """Refuse, before any model is built, a store whose features the objective cannot use: what
    the method refuses itself (``Method.check_data``: a missing or mismatched ``clip_text``, an
    image feature DALR's CMA cannot compare), a feature its ``Needs`` declare but the store lacks,
    or a false-negative filter that would mask (nearly) every negative."""
    s = cfg.objective
    method = method_of(s)
    if data.pairs is None:
        return
    store = data.pairs

    def hidden() -> int:
        from transformers import AutoConfig

        from trainables.models.pretrained import resolve_encoder

        return AutoConfig.from_pretrained(resolve_encoder(cfg.encoder, cfg.data.cache_dir)).hidden_size

    method.check_data(s, StoreView(str(store.path), data.image_column, data.image_dim,
                                   data.clip_text_dim, tuple(store.feature_columns), hidden))
    f = method.negative_filter(s)
    if (method.needs(s).clip_text or f is not None) and data.clip_text_dim is None:
        what = "its threshold filter" if f is not None else "one of its terms"
        raise ValueError(
            f"{store.path} has no 'clip_text' column but method {s.method!r} needs the stored CLIP "
            f"caption feature ({what}); convert a CLIP store (python -m trainables.convert "
            "clip-json) or switch that off"
        )
    if f is not None and data.clip_text_dim != data.image_dim:
        raise ValueError(
            f"{store.path}: {data.image_column!r} features are {data.image_dim}-d but 'clip_text' "
            f"is {data.clip_text_dim}-d; the threshold filter compares them, so both must come "
            f"from one CLIP model: use such a store or set {f.setting}=None"
        )
    threshold_sample(cfg, data)


def threshold_sample(cfg: RunConfig, data: TrainingData) -> FilterSample | None:
    """What the method's false-negative filter (``Method.negative_filter``) does to a sample of
    this store's negatives (None: no filter).

    Refuses a filter that would mask (nearly) every negative: both grounding terms would then be
    exactly 0 and the run would train without grounding (docs/official-code.md §5.4, §9).
    """
    f = method_of(cfg.objective).negative_filter(cfg.objective)
    if f is None or data.pairs is None or data.clip_text_dim != data.image_dim:
        return None
    s = sample_filter(data.pairs.column("clip_text"), data.pairs.column(data.image_column),
                      f.threshold, f.on)
    if s.nearly_all:
        scores = "raw dot products" if f.on == "dot" else "cosines"
        raise ValueError(
            f"{f.setting}={f.threshold:g} on {scores} masks {s.masked:.1%} of "
            f"{s.n_pairs} sampled negatives of {data.pairs.path} (mean norms: clip_text "
            f"{s.text_norm:.3g}, {data.image_column} {s.image_norm:.3g}; median score "
            f"{s.median:.3g}), so both grounding terms would be 0; set {f.on_setting}="
            f"cosine, a threshold above {s.passes_above:.3g} (above it at most {NEARLY_ALL:.0%} "
            f"are masked and the run may start; above the median {s.median:.3g}, under half), or "
            f"{f.setting}=None (the official scripts' setting)"
        )
    return s
