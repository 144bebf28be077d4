"""Wall-clock time of a whole table, end to end, as a user runs it: arrays against one run a trial.

    python bench/table_timing.py --grid table3 --array-size auto 1
    python bench/table_timing.py --grid table3 --profile bench/profiles/demo_20steps.yaml --array-size auto 1

Each variant runs ``python -m orchestrator.ablate --grid GRID [--profile P] --array-size A`` in a
fresh folder (its own MLflow store and Ray storage; the demo corpus cache is shared, as on a
laptop after the first run), one after the other, and prints the command, the wall time, the
arrays it made and the table's Avg column. Start it on a quiet machine: the figures are the
point. The embedded Ray starts in each run, so Ray's start-up is part of the time, as for a user.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def header(argv: list[str]) -> str:
    import torch

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"# command       python bench/table_timing.py {shlex.join(argv)}\n"
            f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} CPUs, loadavg_1m {load:.1f}")


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20 if path.exists() else 0.0


def run(grid: str, profile: str | None, array_size: str, extra: list[str], cache: Path,
        dry: bool = False) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"table-{array_size}-"))
    cmd = [sys.executable, "-m", "orchestrator.ablate", "--grid", grid, "--array-size", array_size,
           *(["--profile", str(Path(profile).resolve())] if profile else []), *extra,
           *(["--dry-run"] if dry else [])]
    env = dict(os.environ, MMEMB_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    # The demo corpus lives in the profile's data.cache_dir (default .cache/mmemb under the cwd):
    # link it so every variant reuses one generated corpus.
    (work / ".cache").mkdir()
    (work / ".cache" / "mmemb").symlink_to(cache, target_is_directory=True)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    arrays = re.search(r"(\d+) runs in (\d+) arrays? of ([\d-]+) members?", out)
    avg = re.findall(r"^\| (.+?) \| .*\| ([\d.]+±[\d.]+\*?) \|$", out, flags=re.M)
    return {"array_size": array_size, "rc": proc.returncode, "wall_s": wall, "work": str(work),
            "arrays": arrays.group(0) if arrays else "?", "avg": avg,
            "runs_mb": disk_mb(work / "runs"), "artifacts_mb": disk_mb(work / "mlartifacts"),
            "tail": out[-1500:] if proc.returncode else ""}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", default="table3")
    p.add_argument("--profile")
    p.add_argument("--array-size", nargs="+", default=["auto", "1"])
    p.add_argument("extra", nargs="*", help="more ablate arguments, after --")
    args = p.parse_args(argv)
    print(header(argv), flush=True)
    cache = Path(tempfile.mkdtemp(prefix="table-cache-"))
    # One --dry-run first generates the demo corpus (and derives the demo student) into the
    # shared cache, so no timed variant pays for it.
    warm = run(args.grid, args.profile, args.array_size[0], args.extra, cache, dry=True)
    print(f"cache warmed by --dry-run in {warm['wall_s']:.0f} s (exit {warm['rc']})", flush=True)
    for size in args.array_size:
        r = run(args.grid, args.profile, size, args.extra, cache)
        print(f"\narray-size {size}: {r['wall_s']:.0f} s wall ({r['wall_s'] / 60:.1f} min), "
              f"exit {r['rc']}, {r['arrays']}; disk after: runs/ {r['runs_mb']:.1f} MiB, MLflow "
              f"artifacts {r['artifacts_mb']:.0f} MiB", flush=True)
        for cell, avg in r["avg"]:
            print(f"  {cell:<45s} Avg {avg}")
        if r["tail"]:
            print(r["tail"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
