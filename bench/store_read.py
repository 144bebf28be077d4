"""Benchmark: random-batch read rate of the feature store vs the GPU step rate it must feed.

Writes a synthetic store (default 150k rows, image + clip_text, 768-d each, i.e. the size of the
KDMCSE Flickr JSON) into a temp dir, opens it (first open decodes the Parquet into the memory-mapped
.npy cache, second open reuses it), then times ``FeatureStore.batch`` on random index batches.

    python bench/store_read.py [--rows 150000] [--dim 768] [--batch 128] [--seconds 5]
    python bench/store_read.py --checksums    # what page CRCs + the NaN/inf pass cost at decode

``--checksums`` writes the same table a second time without page checksums (as stores written
before them are) and times the first open of each: the decode reads every page once, verifying
its CRC where it has one and checking every value for NaN/inf.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from trainables.data.store import FeatureStore, StoreMetadata, write_store

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
    ap.add_argument("--repeats", type=int, default=3, help="timed opens per variant (--checksums)")
    ap.add_argument("--checksums", action="store_true",
                    help="time the first open with and without page checksums, then exit")
    args = ap.parse_args()
    if args.checksums:
        checksum_cost(args)
        return

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


def checksum_cost(args: argparse.Namespace) -> None:
    """First open (decode + CRC verification + NaN/inf pass) with and without page checksums."""
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rng = np.random.default_rng(0)
        n, d = args.rows, args.dim
        cols = {"image": rng.standard_normal((n, d), dtype=np.float32),
                "clip_text": rng.standard_normal((n, d), dtype=np.float32)}
        t0 = time.perf_counter()
        finite = all(np.isfinite(a).all() for a in cols.values())
        t_finite = time.perf_counter() - t0
        meta = StoreMetadata("synthetic", d, "synthetic", d, normalized=False)
        caps, ids = [f"a person rides a bike number {i}" for i in range(n)], [str(i // 5) for i in range(n)]
        t0 = time.perf_counter()
        with_crc = write_store(Path(tmp) / "crc.parquet", caps, ids, cols, meta)
        t_write = time.perf_counter() - t0
        del cols
        table = pq.read_table(with_crc)
        without = Path(tmp) / "plain.parquet"
        t0 = time.perf_counter()
        pq.write_table(table, without, compression="none", use_dictionary=False,
                       row_group_size=1 << 20, write_page_checksum=False)
        t_write_plain = time.perf_counter() - t0
        del table
        verify: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeats):  # the CRC check alone: the same file read both ways
            for on in (False, True):
                t0 = time.perf_counter()
                pq.read_table(with_crc, page_checksum_verification=on)
                verify[on].append(time.perf_counter() - t0)
        times: dict[str, list[float]] = {"plain": [], "crc": []}
        for i in range(args.repeats):  # alternated, so load on a shared machine hits both alike
            for name, path in (("plain", without), ("crc", with_crc)):
                cache = Path(tmp) / f"cache-{name}-{i}"
                t0 = time.perf_counter()
                FeatureStore(path, cache_dir=cache)
                times[name].append(time.perf_counter() - t0)
                shutil.rmtree(cache)
    size_mb = n * 2 * d * 4 / 2**20
    plain, crc = float(np.median(times["plain"])), float(np.median(times["crc"]))
    print(f"store: {n} rows x (image {d} + clip_text {d}) float32, ~{size_mb:.0f} MiB of features; "
          f"finite={finite}")
    print(f"write: with page checksums {t_write:.2f} s (write_store: validation + CRCs), "
          f"pyarrow alone without {t_write_plain:.2f} s")
    print(f"first open (decode to the .npy cache, NaN/inf pass), median of {args.repeats}: without checksums "
          f"{plain:.2f} s, with checksums verified {crc:.2f} s -> +{crc - plain:.2f} s "
          f"({100 * (crc - plain) / plain:+.0f}%), once per store version")
    v0, v1 = float(np.median(verify[False])), float(np.median(verify[True]))
    print(f"CRC verification alone (pq.read_table of the checksummed file, median of "
          f"{args.repeats}): off {v0:.2f} s, on {v1:.2f} s -> +{v1 - v0:.2f} s")
    print(f"of which the NaN/inf pass alone (numpy isfinite over both columns): {t_finite:.2f} s")
    print("raw timings (s): " + "; ".join(f"{k} {', '.join(f'{v:.2f}' for v in vs)}"
                                          for k, vs in times.items()))
    print(f"loadavg_1m {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
