"""Convert the official caption/image-feature releases into one validated feature store.

Two layouts exist upstream (docs/official-code.md §4.3, §5.5):

- **MCSE**: a caption text file (one caption per line) plus an HDF5 file whose dataset
  ``features`` is (N, 2048) ResNet-50 features; line i goes with row i (``zip`` in ``data.py``,
  which silently truncates on a count mismatch: here a mismatch is refused).
- **KDMCSE / DALR**: one CLIP JSON ``{key: {"image": file, "captions": [...],
  "image_feat": [D], "lang_feat": [[D], ...]}}``; the official dataset yields one example per
  (caption, image) pair, every caption of every image, in key order. ``image_feat`` -> column
  ``image``, ``lang_feat[k]`` -> ``clip_text``; the features are raw (unnormalised) CLIP outputs.

The COCO JSON is several GB of text, so it is parsed one image entry at a time (``_iter_object``)
instead of ``json.load`` (which would need ~4x the file size in Python floats).

CLI::

    python -m trainables.convert mcse --captions X.txt --features X.hdf5 --out store.parquet
    python -m trainables.convert clip-json --json X.json --out store.parquet

Without ``--out``, a release the paper profile reads (``STORES`` in trainables/config/stores.py:
``flickr30k_ViT_L14.json``, ``train_coco_ViT_L14.json``, MCSE's ``flickr_random_captions.txt`` +
``flickr_resnet.hdf5``) becomes the store the profile reads, beside the released file. Bad input
exits non-zero with one line naming the file, the row/key and the fix.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from trainables.config.stores import DATA_ROOT, STORES, Store
from trainables.data.store import StoreError, StoreMetadata, write_store

DEFAULT_CLIP = "openai/clip-vit-large-patch14"
_CHUNK = 1 << 24  # 16 MiB of text per read
_MAX_ENTRY = 1 << 28  # one image entry larger than this means a malformed file


def _finite_rows(arr: np.ndarray, what: str) -> None:
    bad = ~np.isfinite(arr).reshape(len(arr), -1).all(axis=1)
    if bad.any():
        raise StoreError(f"{what}: NaN/inf in row {int(np.argmax(bad))}; re-extract those features")


def read_mcse(captions: str | Path, features: str | Path) -> tuple[list[str], np.ndarray]:
    """MCSE layout -> (captions, (N, D) float32), validated; line i <-> HDF5 row i."""
    import h5py

    captions, features = Path(captions), Path(features)
    for p in (captions, features):
        if not p.is_file():
            raise StoreError(f"{p}: file not found; download it as the MCSE README says (python -m "
                             "trainables.fetch paper --only mcse-resnet says where and how)")
    # The official loader: open(..., 'r').readlines() + strip (universal newlines, UTF-8).
    try:
        with open(captions, encoding="utf-8") as f:
            sents = [line.strip() for line in f]
    except UnicodeDecodeError as exc:
        raise StoreError(f"{captions}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for i, s in enumerate(sents):
        if not s:
            raise StoreError(
                f"{captions}: empty caption on line {i + 1} (row {i}); remove the line and the "
                "matching HDF5 row, or restore the caption"
            )
    try:
        with h5py.File(features, "r") as f:
            if "features" not in f:
                raise StoreError(f"{features}: no HDF5 dataset 'features' (found {list(f.keys())})")
            ds = f["features"]
            if ds.ndim != 2:
                raise StoreError(f"{features}: 'features' has shape {ds.shape}, expected (N, D)")
            feats = np.asarray(ds[()], dtype=np.float32)
    except OSError as exc:
        raise StoreError(f"{features}: not a readable HDF5 file ({exc}); re-download it") from None
    if len(sents) != len(feats):
        raise StoreError(
            f"{captions}: {len(sents)} caption lines but {features} has {len(feats)} feature rows; "
            "line i must pair with row i, use the matching caption/feature files"
        )
    _finite_rows(feats, str(features))
    return sents, feats


class _TextStream:
    """Just enough of a streaming JSON reader for ``{key: value, ...}`` at the top level."""

    def __init__(self, path: Path):
        self.path = path
        self.f = open(path, encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.buf, self.pos, self.eof = "", 0, False
        self.dec = json.JSONDecoder()

    def close(self) -> None:
        self.f.close()

    def _fill(self) -> bool:
        data = self.f.read(_CHUNK)
        if not data:
            self.eof = True
            return False
        self.buf, self.pos = self.buf[self.pos :] + data, 0
        return True

    def peek(self) -> str:
        while True:
            n = len(self.buf)
            while self.pos < n and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < n or not self._fill():
                return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def expect(self, ch: str, where: str) -> None:
        got = self.peek()
        if got != ch:
            raise StoreError(f"{self.path}: malformed JSON {where}: expected {ch!r}, got {got!r}")
        self.pos += 1

    def value(self, where: str):
        self.peek()
        while True:
            try:
                val, end = self.dec.raw_decode(self.buf, self.pos)
                if end < len(self.buf) or self.eof:
                    self.pos = end
                    return val
            except json.JSONDecodeError as exc:
                if self.eof or len(self.buf) - self.pos > _MAX_ENTRY:
                    raise StoreError(f"{self.path}: malformed JSON {where} ({exc.msg})") from None
            self._fill()  # the value may continue past the buffer: read more, then retry


def _iter_object(path: Path) -> Iterator[tuple[str, object]]:
    """Yield the (key, value) pairs of a top-level JSON object, one at a time."""
    s = _TextStream(path)
    try:
        s.expect("{", "at the start")
        if s.peek() == "}":
            return
        last = "<start>"
        while True:
            key = s.value(f"after key {last!r}")
            if not isinstance(key, str):
                raise StoreError(f"{path}: malformed JSON after key {last!r}: expected a key string")
            s.expect(":", f"after key {key!r}")
            yield key, s.value(f"in the value of key {key!r}")
            last = key
            nxt = s.peek()
            s.pos += 1
            if nxt == "}":
                break
            if nxt != ",":
                raise StoreError(f"{path}: malformed JSON after key {key!r}: expected ',' or '}}'")
        if s.peek():
            raise StoreError(f"{path}: trailing data after the top-level object")
    except UnicodeDecodeError as exc:
        raise StoreError(f"{path}: not UTF-8 text ({exc.reason})") from None
    finally:
        s.close()


def read_clip_json(path: str | Path) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """CLIP JSON -> (captions, image_ids, image (N, Dv), clip_text (N, Dt)), one row per caption."""
    path = Path(path)
    if not path.is_file():
        raise StoreError(f"{path}: file not found; download the KDMCSE/DALR CLIP JSON (python -m "
                         "trainables.fetch paper --dry-run says where)")
    caps: list[str] = []
    ids: list[str] = []
    imgs: list[np.ndarray] = []
    txts: list[np.ndarray] = []
    dims: tuple[int, int] | None = None
    for key, entry in _iter_object(path):
        where = f"{path}: key {key!r}"
        if not isinstance(entry, dict) or not {"captions", "image_feat", "lang_feat"} <= entry.keys():
            raise StoreError(f"{where}: needs 'captions', 'image_feat' and 'lang_feat'; re-export it")
        captions = entry["captions"]
        try:
            img = np.asarray(entry["image_feat"], dtype=np.float32)
            txt = np.asarray(entry["lang_feat"], dtype=np.float32)
        except (ValueError, TypeError):
            raise StoreError(f"{where}: ragged or non-numeric features; re-export it") from None
        if not isinstance(captions, list) or not captions:
            raise StoreError(f"{where}: 'captions' must be a non-empty list; drop the image")
        if img.ndim != 1 or txt.ndim != 2:
            raise StoreError(
                f"{where}: image_feat shape {img.shape} / lang_feat shape {txt.shape}, "
                "expected (D,) and (n_captions, D)"
            )
        if len(txt) != len(captions):
            raise StoreError(
                f"{where}: {len(captions)} captions but {len(txt)} lang_feat rows; "
                "they must be aligned, re-export that entry"
            )
        if dims is None:
            dims = (img.shape[0], txt.shape[1])
        elif (img.shape[0], txt.shape[1]) != dims:
            raise StoreError(
                f"{where}: feature dims {(img.shape[0], txt.shape[1])} differ from earlier "
                f"entries {dims}; all rows must come from one CLIP model"
            )
        if not (np.isfinite(img).all() and np.isfinite(txt).all()):
            raise StoreError(f"{where}: NaN/inf in the features; re-extract that image")
        for k, c in enumerate(captions):
            if not isinstance(c, str) or not c.strip():
                raise StoreError(f"{where}: caption {k} is empty or not a string; drop it and its lang_feat row")
        caps.extend(captions)  # as-is: the official JSON loader does not strip them
        ids.extend([key] * len(captions))
        imgs.append(np.broadcast_to(img, (len(captions), img.shape[0])))
        txts.append(txt)
    if not caps:
        raise StoreError(f"{path}: no images in the JSON; check the file")
    return caps, ids, np.concatenate(imgs), np.concatenate(txts)


def convert_mcse(captions, features, out, image_teacher: str = "resnet50") -> Path:
    sents, feats = read_mcse(captions, features)
    meta = StoreMetadata(image_teacher, feats.shape[1], None, None, normalized=False,
                         extra={"source": "mcse", "captions": str(captions), "features": str(features)})
    # MCSE has one caption per image and no image ids: the row number is the id.
    return write_store(out, sents, [str(i) for i in range(len(sents))], {"image": feats}, meta)


def convert_clip_json(path, out, teacher: str = DEFAULT_CLIP) -> Path:
    caps, ids, img, txt = read_clip_json(path)
    meta = StoreMetadata(teacher, img.shape[1], teacher, txt.shape[1], normalized=False,
                         extra={"source": "clip-json", "json": str(path)})
    return write_store(out, caps, ids, {"image": img, "clip_text": txt}, meta)


def command(store: Store, root: str = DATA_ROOT) -> str:
    """The command that makes ``store`` from its released files under ``root``: what the fetch
    prints, with ``--out`` spelled out."""
    given = " ".join(f"{opt} {root}/{name}" for opt, name in store.sources)
    return f"python -m trainables.convert {store.convert} {given} --out {root}/{store.file}"


def default_out(cmd: str, given: dict[str, str]) -> Path:
    """The store the paper profile reads that is made from the released files ``given``
    (option -> path), beside them; one line saying to name ``--out`` when they are no such release."""
    for store in STORES.values():
        if store.convert == cmd and all(Path(given.get(opt) or "").name == name
                                        for opt, name in store.sources):
            return Path(given[store.sources[0][0]]).parent / store.file
    known = "; ".join(" + ".join(store.source_files()) for store in STORES.values()
                      if store.convert == cmd)
    raise StoreError(f"--out is needed: {' + '.join(Path(v).name for v in given.values())} is not "
                     f"a release the paper profile reads ({known}), so no store name follows "
                     "from it; name the store with --out")


def parser() -> argparse.ArgumentParser:
    from trainables.runtime.command_line import Parser

    ap = Parser(prog="python -m trainables.convert", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    out_help = ("the store to write (default: for a release the paper profile reads, the store "
                "it reads, beside the released file)")
    m = sub.add_parser("mcse", help="MCSE caption .txt + ResNet .hdf5")
    m.add_argument("--captions", required=True)
    m.add_argument("--features", required=True)
    m.add_argument("--out", default=None, help=out_help)
    m.add_argument("--image-teacher", default="resnet50")
    c = sub.add_parser("clip-json", help="KDMCSE/DALR CLIP JSON")
    c.add_argument("--json", required=True)
    c.add_argument("--out", default=None, help=out_help)
    c.add_argument("--teacher", default=DEFAULT_CLIP)
    return ap


def main(argv: list[str] | None = None) -> int:
    from trainables.runtime.command_line import writable_file

    args = parser().parse_args(argv)
    try:
        given = ({"--captions": args.captions, "--features": args.features} if args.cmd == "mcse"
                 else {"--json": args.json})
        out = args.out or default_out(args.cmd, given)
        writable_file(out, "--out")
        if args.cmd == "mcse":
            out = convert_mcse(args.captions, args.features, out, args.image_teacher)
        else:
            out = convert_clip_json(args.json, out, args.teacher)
    except (ValueError, OSError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
