"""CLIP teacher feature extraction: a (image, caption) pairs file -> a feature store, on Ray Data.

Why this exists: KDMCSE and DALR train against frozen CLIP features that their (deleted)
``preprocess.py`` extracted once into JSON (docs/official-code.md §5.1, §5.5): raw ``encode_image`` /
``encode_text`` outputs, never normalised, one image feature per image and one text feature per
caption. This job rebuilds that for any ``CLIPModel`` (``openai/clip-vit-base-patch32`` as the
papers print it, ``openai/clip-vit-large-patch14`` as the official code used) and writes the
project's Parquet store (:mod:`trainables.data.store`): columns ``image`` and ``clip_text``, fp32,
unnormalised, one row per pair, ``normalized=False``.

How:
  * the pairs file (CSV with header ``image,caption``, the Kaggle Flickr file KDMCSE read, or
    JSONL with the same keys) is validated up front: malformed rows, empty captions and missing
    image files fail before any compute, naming the file and row;
  * pairs are grouped into shards (about ``shard_size`` pairs; all captions of an image in one
    shard), so each unique image is embedded exactly once and joined to its captions;
  * pending shards' work items (one per unique image, one per caption) go through one Ray Data
    ``map_batches`` over an actor pool (one model load per actor, ``num_gpus`` per actor on a
    GPU cluster, CPU otherwise); Ray Data draws the progress bar;
  * each finished shard is written atomically to ``WORK/shards/part-00012.parquet`` with a
    fingerprint of its rows and the model; a restart skips shards that are present and valid;
  * when all shards exist they are merged with :func:`trainables.data.store.write_store` (atomic), so
    the output is either complete or absent.

CLI: ``python -m trainables.extract --pairs captions.csv --images DIR --model M --out store.parquet``;
with ``--column resnet --model microsoft/resnet-50`` (and no ``--pairs``) it adds an image
encoder's feature to an existing store instead (:mod:`trainables.data.image_columns`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trainables.data.store import StoreMetadata, write_store

IMAGE, TEXT = 0, 1  # work-item kinds


class ExtractError(ValueError):
    """Bad input or a failed extraction; the message names the file/row and the fix."""


@dataclass(frozen=True)
class ExtractConfig:
    pairs: Path
    images: Path
    model: str
    out: Path
    work_dir: Path | None = None
    """where shards live; default ``<out>.work``"""
    batch_size: int = 64
    shard_size: int = 1000
    num_actors: int = 1
    num_gpus_per_actor: float = 0.0
    num_cpus_per_actor: float = 1.0
    keep_shards: bool = False
    """keep ``WORK/shards`` after the final merge (default: delete, they duplicate the store)"""
    max_shards: int | None = None
    """testing knob: stop after computing this many new shards, without merging"""
    progress: bool = True


@dataclass(frozen=True)
class ExtractResult:
    out: Path | None
    """the final store, or None when stopped early by ``max_shards``"""
    shards_total: int
    shards_skipped: int
    """valid shards found from an earlier run"""
    shards_computed: int
    items_computed: int
    """images + captions sent to the model in this run"""


@dataclass(frozen=True)
class Shard:
    index: int
    rows: tuple[int, ...]
    images: tuple[str, ...]
    """unique image names of the shard, first-appearance order"""


@dataclass(frozen=True)
class Pairs:
    images: list[str]
    captions: list[str]
    where: list[str]
    """``file:line`` of each pair, for error messages"""


def read_pairs(path: str | os.PathLike) -> Pairs:
    """The (image name, caption) rows of a CSV (header ``image,caption``) or JSONL pairs file."""
    path = Path(path)
    if not path.is_file():
        raise ExtractError(f"{path}: pairs file not found; pass --pairs captions.csv (or .jsonl)")
    images: list[str] = []
    captions: list[str] = []
    wheres: list[str] = []

    def add(image: object, caption: object, where: str) -> None:
        if not isinstance(image, str) or not image.strip():
            raise ExtractError(f"{where}: empty image name; every row needs an image file name")
        if not isinstance(caption, str) or not caption.strip():
            raise ExtractError(f"{where}: empty caption for image {image!r}; drop or fix that row")
        images.append(image.strip())
        captions.append(caption.strip())
        wheres.append(where)

    if path.suffix.lower() in (".jsonl", ".json"):
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ExtractError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
                if not isinstance(row, dict) or "image" not in row or "caption" not in row:
                    raise ExtractError(f"{path}:{lineno}: expected an object with keys 'image' and 'caption'")
                add(row["image"], row["caption"], f"{path}:{lineno}")
    else:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            if "image" not in header or "caption" not in header:
                raise ExtractError(
                    f"{path}: CSV header is {header!r}; expected columns 'image' and 'caption' "
                    "(the Kaggle Flickr30k captions.txt layout)"
                )
            try:
                for row in reader:
                    where = f"{path}:{reader.line_num}"
                    if None in row or None in row.values():
                        raise ExtractError(f"{where}: wrong number of fields for header {header!r}; quote captions that contain commas")
                    add(row["image"], row["caption"], where)
            except csv.Error as exc:
                raise ExtractError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
    if not captions:
        raise ExtractError(f"{path}: no pairs found; the file is empty")
    return Pairs(images, captions, wheres)


def check_images(pairs: Pairs, images_dir: Path) -> None:
    """Fail before any compute if an image file is missing (names the first one and its row)."""
    if not images_dir.is_dir():
        raise ExtractError(f"{images_dir}: image folder not found; pass --images DIR")
    for row, name in enumerate(pairs.images):
        if not (images_dir / name).is_file():
            raise ExtractError(
                f"{pairs.where[row]}: image {name!r} not found at {images_dir / name}; "
                "fix --images or drop the row"
            )


def plan_shards(images: Sequence[str], shard_size: int) -> list[Shard]:
    """Group pairs by image (first-appearance order) and pack images into ~shard_size-pair shards."""
    if shard_size < 1:
        raise ExtractError(f"shard_size must be >= 1, got {shard_size}")
    by_image: dict[str, list[int]] = defaultdict(list)
    for row, name in enumerate(images):
        by_image[name].append(row)
    shards: list[Shard] = []
    rows: list[int] = []
    names: list[str] = []
    for name, image_rows in by_image.items():
        names.append(name)
        rows.extend(image_rows)
        if len(rows) >= shard_size:
            shards.append(Shard(len(shards), tuple(rows), tuple(names)))
            rows, names = [], []
    if rows:
        shards.append(Shard(len(shards), tuple(rows), tuple(names)))
    return shards


def _fingerprint(shard: Shard, images: Sequence[str], captions: Sequence[str], model: str) -> str:
    """What a shard was computed from; a restart reuses a shard only if this matches."""
    payload = json.dumps([model, [(r, images[r], captions[r]) for r in shard.rows]])
    return hashlib.sha256(payload.encode()).hexdigest()


def _shard_path(work: Path, index: int) -> Path:
    return work / "shards" / f"part-{index:05d}.parquet"


def _read_valid_shard(path: Path, fingerprint: str, n_rows: int) -> pa.Table | None:
    """The shard table if present, readable, from the same input/model and finite; else None."""
    if not path.is_file():
        return None
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError):
        return None
    meta = table.schema.metadata or {}
    if meta.get(b"fingerprint") != fingerprint.encode() or table.num_rows != n_rows:
        return None
    for name in ("image", "clip_text"):
        if name not in table.column_names:
            return None
        if not np.isfinite(table.column(name).combine_chunks().flatten().to_numpy()).all():
            return None
    return table


def _write_shard(path: Path, rows: np.ndarray, image: np.ndarray, text: np.ndarray, fingerprint: str) -> None:
    def fixed(arr: np.ndarray) -> pa.FixedSizeListArray:
        return pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1), pa.float32()), arr.shape[1])

    table = pa.table({"row": pa.array(rows, pa.int64()), "image": fixed(image), "clip_text": fixed(text)})
    table = table.replace_schema_metadata({b"fingerprint": fingerprint.encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="none")
        os.replace(tmp, path)  # a killed run leaves at most a stray .tmp, never a partial part file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ClipEmbedder:
    """Ray Data callable class: one CLIP model per actor; embeds a mixed batch of image/text items.

    Per-item failures (unreadable image) come back in the ``error`` column instead of raising, so
    the driver can name the file and row in a one-line error.
    """

    def __init__(self, model: str, images_root: str, use_gpu: bool = False):
        import torch
        from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel

        self.torch = torch
        self.device = "cuda" if use_gpu and torch.cuda.is_available() else "cpu"
        self.model = CLIPModel.from_pretrained(model).to(self.device).eval()
        # PIL backend: bicubic resize + centre crop on PIL images, as the official clip package does.
        self.processor = AutoImageProcessor.from_pretrained(model, backend="pil")
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.max_length = min(
            self.tokenizer.model_max_length, self.model.config.text_config.max_position_embeddings
        )
        self.root = Path(images_root)
        self.dim = int(self.model.config.projection_dim)

    def _features(self, out) -> np.ndarray:
        # transformers 5 returns a ModelOutput whose pooler_output is the projected feature.
        feats = out if isinstance(out, self.torch.Tensor) else out.pooler_output
        return feats.float().cpu().numpy()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from PIL import Image

        kinds = np.asarray(batch["kind"])
        payload = batch["payload"]
        feats = np.zeros((len(kinds), self.dim), np.float32)
        errors = np.array([""] * len(kinds), dtype=object)
        img_idx = [i for i in range(len(kinds)) if kinds[i] == IMAGE]
        txt_idx = [i for i in range(len(kinds)) if kinds[i] == TEXT]
        pil, ok = [], []
        for i in img_idx:
            try:
                with Image.open(self.root / str(payload[i])) as im:
                    pil.append(im.convert("RGB"))
                ok.append(i)
            except Exception as exc:  # any decoder failure -> a named error, not a dead actor
                errors[i] = f"unreadable image ({type(exc).__name__}: {exc})".splitlines()[0]
        with self.torch.no_grad():
            if pil:
                pixels = self.processor(images=pil, return_tensors="pt")["pixel_values"]
                feats[ok] = self._features(self.model.get_image_features(pixel_values=pixels.to(self.device)))
            if txt_idx:
                tok = self.tokenizer(
                    [str(payload[i]) for i in txt_idx], padding=True, truncation=True,
                    max_length=self.max_length, return_tensors="pt",
                )
                tok = {k: v.to(self.device) for k, v in tok.items() if k in ("input_ids", "attention_mask")}
                feats[txt_idx] = self._features(self.model.get_text_features(**tok))
        return {"shard": batch["shard"], "kind": kinds, "key": batch["key"], "feature": feats, "error": errors}


def init_ray(address: str | None = None) -> None:
    """Connect to ``address`` (e.g. "auto"), or start the project's light local Ray."""
    from trainables.runtime.ray_env import init_ray as start

    start(address, log_to_driver=False)


def check_resources(cfg: ExtractConfig, cluster: dict[str, float]) -> None:
    """Refuse an actor pool the cluster cannot hold: Ray Data would wait for it forever."""
    if cfg.num_actors < 1:
        raise ExtractError(f"--num-actors {cfg.num_actors}; give 1 or more")
    for key, per, flag in (("CPU", cfg.num_cpus_per_actor, "--num-cpus-per-actor"),
                           ("GPU", cfg.num_gpus_per_actor, "--num-gpus-per-actor")):
        have = cluster.get(key, 0.0)
        if per < 0:
            raise ExtractError(f"{flag} {per:g} is negative; give 0 or more")
        if per > have + 1e-9:
            raise ExtractError(f"{flag} {per:g} but the Ray cluster has {have:g} {key}s; lower it"
                               + (" or join a GPU cluster with --address" if key == "GPU" else ""))
        if per > 0 and cfg.num_actors * per > have + 1e-9:
            fit = int((have + 1e-9) // per)
            raise ExtractError(f"--num-actors {cfg.num_actors} x {flag} {per:g} needs "
                               f"{cfg.num_actors * per:g} {key}s but the Ray cluster has {have:g}; "
                               f"use --num-actors {fit} or less")


def _model_dim(model: str) -> int:
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as exc:
        raise ExtractError(f"cannot load CLIP config {model!r} ({str(exc).splitlines()[0]}); pass a local CLIPModel folder or a cached hub name") from None
    if cfg.model_type != "clip":
        raise ExtractError(f"{model!r} is a {cfg.model_type!r} model, not CLIP; pass a CLIPModel (e.g. openai/clip-vit-large-patch14)")
    return int(cfg.projection_dim)


def run_extract(cfg: ExtractConfig) -> ExtractResult:
    """Run (or resume) the job; see the module docstring."""
    import ray
    import ray.data

    pairs = read_pairs(cfg.pairs)
    check_images(pairs, Path(cfg.images))
    images, captions = pairs.images, pairs.captions
    dim = _model_dim(cfg.model)
    work = Path(cfg.work_dir) if cfg.work_dir else Path(str(cfg.out) + ".work")
    shards = plan_shards(images, cfg.shard_size)
    prints = {s.index: _fingerprint(s, images, captions, cfg.model) for s in shards}
    done = {
        s.index for s in shards
        if _read_valid_shard(_shard_path(work, s.index), prints[s.index], len(s.rows)) is not None
    }
    pending = [s for s in shards if s.index not in done]
    if cfg.max_shards is not None:
        pending = pending[: cfg.max_shards]
    items = []
    for s in pending:
        items += [{"shard": s.index, "kind": IMAGE, "key": k, "payload": n} for k, n in enumerate(s.images)]
        items += [{"shard": s.index, "kind": TEXT, "key": r, "payload": captions[r]} for r in s.rows]
    computed = 0
    if items:
        init_ray()
        check_resources(cfg, ray.cluster_resources())
        ray.data.DataContext.get_current().enable_progress_bars = cfg.progress
        ds = ray.data.from_items(items).map_batches(
            ClipEmbedder,
            fn_constructor_kwargs={"model": cfg.model, "images_root": str(cfg.images), "use_gpu": cfg.num_gpus_per_actor > 0},
            compute=ray.data.ActorPoolStrategy(size=cfg.num_actors),
            batch_size=cfg.batch_size,
            num_cpus=cfg.num_cpus_per_actor,
            num_gpus=cfg.num_gpus_per_actor or None,
        )
        by_index = {s.index: s for s in pending}
        acc: dict[int, dict[tuple[int, int], np.ndarray]] = defaultdict(dict)
        for out in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for shard, kind, key, feat, err in zip(out["shard"], out["kind"], out["key"], out["feature"], out["error"], strict=True):
                s = by_index[int(shard)]
                if err:
                    name = s.images[int(key)]
                    row = next(r for r in s.rows if images[r] == name)
                    raise ExtractError(
                        f"{pairs.where[row]}: image {Path(cfg.images) / name}: {err}; "
                        "replace the file or drop its rows (completed shards are kept for resume)"
                    )
                acc[int(shard)][(int(kind), int(key))] = feat
                if len(acc[int(shard)]) == len(s.images) + len(s.rows):
                    _finish_shard(work, s, acc.pop(int(shard)), images, prints[s.index])
                    computed += 1
        if acc:  # cannot happen unless Ray Data dropped rows; refuse to pretend
            raise ExtractError(f"Ray Data returned incomplete shards {sorted(acc)}; rerun to resume")
    n_items = len(items)
    if len(done) + computed < len(shards):
        return ExtractResult(None, len(shards), len(done), computed, n_items)
    _merge(cfg, work, shards, prints, images, captions, dim)
    return ExtractResult(Path(cfg.out), len(shards), len(done), computed, n_items)


def _finish_shard(work: Path, s: Shard, feats: dict, images: Sequence[str], fingerprint: str) -> None:
    pos = {name: k for k, name in enumerate(s.images)}
    image = np.stack([feats[(IMAGE, pos[images[r]])] for r in s.rows])  # join image -> its captions
    text = np.stack([feats[(TEXT, r)] for r in s.rows])
    _write_shard(_shard_path(work, s.index), np.asarray(s.rows), image, text, fingerprint)
    print(f"extract: shard {s.index} done ({len(s.rows)} pairs, {len(s.images)} images)", file=sys.stderr)


def _merge(cfg, work, shards, prints, images, captions, dim) -> None:
    n = len(captions)
    image = np.empty((n, dim), np.float32)
    text = np.empty((n, dim), np.float32)
    for s in shards:
        table = _read_valid_shard(_shard_path(work, s.index), prints[s.index], len(s.rows))
        if table is None:
            raise ExtractError(f"{_shard_path(work, s.index)} vanished or changed during the run; rerun to recompute it")
        rows = table.column("row").to_numpy()
        image[rows] = table.column("image").combine_chunks().flatten().to_numpy().reshape(-1, dim)
        text[rows] = table.column("clip_text").combine_chunks().flatten().to_numpy().reshape(-1, dim)
    meta = StoreMetadata(
        image_teacher=cfg.model, image_dim=dim, text_teacher=cfg.model, text_dim=dim, normalized=False,
        extra={"source": "trainables.extract", "pairs": str(cfg.pairs), "num_images": len(set(images))},
    )
    write_store(cfg.out, captions, images, {"image": image, "clip_text": text}, meta)
    if not cfg.keep_shards:
        shutil.rmtree(work / "shards", ignore_errors=True)
        with contextlib.suppress(OSError):
            work.rmdir()  # only if empty: the user may have pointed --work-dir at a shared folder


def parser() -> argparse.ArgumentParser:
    from trainables.runtime.checks import NON_NEGATIVE, POSITIVE, count
    from trainables.runtime.command_line import Parser, option

    p = Parser(prog="python -m trainables.extract", description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=Path, default=None,
                   help="CSV (image,caption) or JSONL pairs file (not with --column)")
    p.add_argument("--images", required=True, type=Path, help="folder the image names are relative to")
    p.add_argument("--model", default=None,
                   help="CLIPModel hub name or folder (default openai/clip-vit-base-patch32); "
                        "with --column an image encoder, e.g. microsoft/resnet-50")
    p.add_argument("--out", required=True, type=Path,
                   help="the store to write; with --column, the store to add the column to")
    p.add_argument("--column", default=None,
                   help="add this image feature column (e.g. resnet, for DALR Table 9's ResNet "
                        "cells) to the existing store --out, from each row's image under "
                        "--images (trainables/data/image_columns.py)")
    p.add_argument("--address", default=None, help="Ray cluster address (e.g. auto); default: local")
    p.add_argument("--batch-size", type=option(count(1)), default=64)
    p.add_argument("--shard-size", type=option(count(1)), default=1000)
    p.add_argument("--num-actors", type=option(count(1)), default=1)
    p.add_argument("--num-gpus-per-actor", type=option(NON_NEGATIVE), default=0.0)
    p.add_argument("--num-cpus-per-actor", type=option(POSITIVE), default=1.0)
    p.add_argument("--work-dir", type=Path, default=None)
    p.add_argument("--keep-shards", action="store_true")
    p.add_argument("--no-progress", action="store_true", help="hide Ray Data's progress bars")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from trainables.runtime.command_line import writable_file, writable_folder

    p = parser()
    a = p.parse_args(argv)
    if a.column is not None:
        from trainables.data.image_columns import command

        return command(p, a)
    if a.pairs is None:
        p.error("--pairs is required (the captions file), unless --column adds an image "
                "feature to an existing store")
    cfg = ExtractConfig(
        pairs=a.pairs, images=a.images, model=a.model or "openai/clip-vit-base-patch32",
        out=a.out, work_dir=a.work_dir,
        batch_size=a.batch_size, shard_size=a.shard_size, num_actors=a.num_actors,
        num_gpus_per_actor=a.num_gpus_per_actor, num_cpus_per_actor=a.num_cpus_per_actor,
        keep_shards=a.keep_shards, progress=not a.no_progress,
    )
    try:
        writable_file(a.out, "--out")
        if a.work_dir is not None:
            writable_folder(a.work_dir, "--work-dir")
        if a.address:
            init_ray(a.address)
        res = run_extract(cfg)
    except (ValueError, OSError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(f"wrote {res.out} ({res.shards_computed} shards computed, {res.shards_skipped} reused)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
