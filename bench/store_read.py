"""Benchmark: random-batch read rate of the feature store vs the GPU step rate it must feed.

Writes a synthetic store (default 150k rows, image + clip_text, 768-d each, i.e. the size of the
KDMCSE Flickr JSON) into a temp dir, opens it (first open decodes the Parquet into the memory-mapped
.npy cache, second open reuses it), then times ``FeatureStore.batch`` on random index batches.

    python bench/store_read.py [--rows 150000] [--dim 768] [--batch 128] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from trainables.store import FeatureStore, StoreMetadata, write_store

# Assumed, not measured here: a BERT-base forward+backward at bs 128, len 32, two dropout views,
# fp32 (as the official code), on one H100 runs ~5-10 steps/s.
GPU_STEPS_PER_S = (5.0, 10.0)


def _anon_mb() -> float:
    """Private (anonymous) resident memory of this process, MB (Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=150_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--dir", default=None, help="where to write the store (default: a temp dir)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rng = np.random.default_rng(0)
        n, d = args.rows, args.dim
        caps = [f"a person rides a bike number {i}" for i in range(n)]
        ids = [str(i // 5) for i in range(n)]
        cols = {
            "image": rng.standard_normal((n, d), dtype=np.float32),
            "clip_text": rng.standard_normal((n, d), dtype=np.float32),
        }
        meta = StoreMetadata("synthetic", d, "synthetic", d, normalized=False)
        t0 = time.perf_counter()
        path = write_store(Path(tmp) / "bench.parquet", caps, ids, cols, meta)
        t_write = time.perf_counter() - t0
        del cols
        size_mb = os.path.getsize(path) / 2**20

        t0 = time.perf_counter()
        FeatureStore(path)
        t_first = time.perf_counter() - t0
        anon0 = _anon_mb()
        t0 = time.perf_counter()
        fs = FeatureStore(path)
        t_open = time.perf_counter() - t0

        batches = [rng.integers(0, n, args.batch) for _ in range(256)]
        fs.batch(batches[0])  # warm-up
        count, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            fs.batch(batches[count % len(batches)])
            count += 1
        dt = time.perf_counter() - t0
        anon1 = _anon_mb()

    rate = count / dt
    mb_s = rate * args.batch * 2 * d * 4 / 2**20
    lo, hi = GPU_STEPS_PER_S
    print(f"store: {n} rows x (image {d} + clip_text {d}) float32, {size_mb:.0f} MiB Parquet")
    print(f"write {t_write:.2f} s | first open (decode to .npy cache) {t_first:.2f} s | "
          f"cached open {t_open * 1e3:.0f} ms")
    print(f"private memory of a cached open + {count} batches: +{anon1 - anon0:.0f} MB "
          f"(features stay in the shared page cache)")
    print(f"random batches of {args.batch}: {rate:,.0f} batches/s, {mb_s:,.0f} MB/s of features, "
          f"{rate * args.batch:,.0f} rows/s (image + clip_text + caption + image_id)")
    print(f"GPU step rate (BERT-base, bs 128, H100; assumed): ~{lo:.0f}-{hi:.0f} steps/s -> reading is "
          f"~{rate / hi:,.0f}-{rate / lo:,.0f}x faster than needed (page cache warm)")


if __name__ == "__main__":
    main()
