"""An image encoder's features of a store's images, added to the store as a column.

    python -m trainables.extract --images DIR --model microsoft/resnet-50 --column resnet --out STORE

DALR's Table 9 pairs each text-teacher combination with two image teachers, CLIP and ResNet: its
ResNet cells read the CLIP store's captions and CLIP text features with a ``resnet`` image
feature beside them (``data.image_column=resnet``). This adds that column to the store the
profile reads, from the images it was made from: every distinct ``image_id`` is looked up under
``DIR`` (as named, or with ``.jpg``), embedded once by a frozen ImageNet ResNet-50 (transformers'
``ResNetModel``: the pooled 2048-d feature MCSE extracted with torchvision's, ``fc`` removed,
docs/official-code.md) and given to each of its captions' rows.

A plain batched loop, not Ray Data: one frozen forward per image (31,783 Flickr30k images, a few
minutes on one GPU), whose result must land in the single store file through
``store.add_columns``, which rewrites the file atomically (complete or absent) anyway; the same
reasoning as ``teacher_columns``. Bad input (a missing store or image, a CLIP model, a column the
store has) is one line before any compute.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainables.data.store import StoreError, add_columns


@dataclass(frozen=True)
class Added:
    out: Path
    column: str
    images: int
    dim: int
    done_before: bool = False
    """the store already had the column: nothing was computed or written"""


def image_files(ids: list[str], images: Path) -> dict[str, Path]:
    """Each distinct image id -> its file under ``images`` (as named, else with ``.jpg``); one
    line naming the first id without a file, how many lack one, and the fix."""
    if not images.is_dir():
        raise StoreError(f"{images}: image folder not found; pass --images DIR (the folder the "
                         "store's image ids name files in)")
    found: dict[str, Path] = {}
    missing: list[str] = []
    for i in dict.fromkeys(ids):
        for name in (i, f"{i}.jpg"):
            if (images / name).is_file():
                found[i] = images / name
                break
        else:
            missing.append(i)
    if missing:
        raise StoreError(f"{images}: no image file for image id {missing[0]!r} ({len(missing)} of "
                         f"{len(found) + len(missing)} ids have none, as named or with .jpg); "
                         "pass the folder holding the images the store was made from")
    return found


def add_image_column(out: Path, images: Path, model: str, column: str = "resnet",
                     batch_size: int = 64, progress: bool = True) -> Added:
    """Add ``column`` (``model``'s pooled feature of each row's image) to the store ``out``."""
    import pyarrow.parquet as pq

    if not Path(out).is_file():
        raise StoreError(f"{out}: feature store not found; make it first (python -m "
                         "trainables.fetch paper --dry-run says how), then add the column to it")
    try:
        schema = pq.read_schema(out)
    except Exception as exc:  # noqa: BLE001 - any unreadable file: one line
        raise StoreError(f"{out}: not a readable store ({str(exc).splitlines()[0]}); re-create "
                         "it") from None
    if column in schema.names:
        dim = schema.field(column).type.list_size
        return Added(Path(out), column, 0, dim, done_before=True)
    ids = [str(x) for x in pq.read_table(out, columns=["image_id"]).column("image_id").to_pylist()]
    check_model(model)
    files = image_files(ids, Path(images))
    encoder = _Encoder(model)
    feats = encoder.embed(list(files.values()), batch_size, progress)
    row_of = {i: k for k, i in enumerate(files)}
    columns = {column: feats[[row_of[i] for i in ids]]}
    add_columns(out, columns, {column: {"model": model, "dim": encoder.dim, "images": str(images),
                                        "source": "trainables.extract --column"}})
    return Added(Path(out), column, len(files), encoder.dim)


def check_model(model: str) -> None:
    """An image encoder's configuration that loads, not CLIP's; one line otherwise."""
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot load {model!r} ({str(exc).splitlines()[0]}); pass a local "
                         "model folder or a cached hub name (python -m trainables.fetch "
                         "paper --only resnet-50 caches microsoft/resnet-50)") from None
    if cfg.model_type == "clip":
        raise StoreError(f"{model!r} is CLIP: a CLIP store is made without --column (python -m "
                         "trainables.extract --pairs ... --model ...); --column adds an "
                         "image-only encoder's feature, e.g. microsoft/resnet-50")


class _Encoder:
    """A frozen image encoder whose output has a pooled feature (ResNet: ``pooler_output`` of
    shape (n, d, 1, 1)); on the GPU when there is one."""

    def __init__(self, model: str):
        import torch
        from transformers import AutoImageProcessor, AutoModel

        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = AutoModel.from_pretrained(model).to(self.device).eval()
        self.processor = AutoImageProcessor.from_pretrained(model, backend="pil")
        self.dim = 0

    def embed(self, files: list[Path], batch_size: int, progress: bool) -> np.ndarray:
        from PIL import Image
        from tqdm.auto import tqdm

        out: list[np.ndarray] = []
        bar = tqdm(total=len(files), unit="img", disable=not progress, file=sys.stderr)
        for start in range(0, len(files), batch_size):
            chunk = files[start:start + batch_size]
            pil = []
            for f in chunk:
                try:
                    with Image.open(f) as im:
                        pil.append(im.convert("RGB"))
                except Exception as exc:  # noqa: BLE001 - any decoder failure: named
                    raise StoreError(f"{f}: unreadable image ({type(exc).__name__}: "
                                     f"{str(exc).splitlines()[0]}); replace the file") from None
            pixels = self.processor(images=pil, return_tensors="pt")["pixel_values"]
            with self.torch.no_grad():
                res = self.model(pixel_values=pixels.to(self.device))
            pooled = getattr(res, "pooler_output", None)
            if pooled is None:
                raise StoreError(f"{type(self.model).__name__} gives no pooled feature; pass an "
                                 "image encoder with one (e.g. microsoft/resnet-50)")
            out.append(pooled.reshape(len(chunk), -1).float().cpu().numpy())
            bar.update(len(chunk))
        bar.close()
        feats = np.concatenate(out)
        self.dim = int(feats.shape[1])
        return feats


def command(p: argparse.ArgumentParser, a: argparse.Namespace) -> int:
    """``python -m trainables.extract --column NAME``: checked options, one line out."""
    if a.pairs is not None:
        p.error("--column adds to the store --out, whose rows name their images; drop --pairs")
    if a.model is None:
        p.error("--column needs --model, the image encoder (e.g. microsoft/resnet-50)")
    try:
        res = add_image_column(a.out, a.images, a.model, a.column, a.batch_size,
                               progress=not a.no_progress)
    except (ValueError, OSError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if res.done_before:
        print(f"{res.out} already has column {res.column} ({res.dim}-d); nothing to do")
    else:
        print(f"added column {res.column} ({res.dim}-d, {res.images} images) to {res.out}")
    return 0
