"""Wall-clock time of a whole table, end to end, as a user runs it: arrays against one run a trial.

    python bench/table_timing.py --grid table3 --array-size auto 1
    python bench/table_timing.py --grid table3 --profile bench/profiles/demo_20steps.yaml --array-size auto 1

Each variant runs ``python -m orchestrator.ablate --grid GRID [--profile P] --array-size A`` in a
fresh folder (its own MLflow store and Ray storage; the demo corpus cache is shared, as on a
laptop after the first run), one after the other, and prints the command, the wall time, the
arrays it made and the table's Avg column. Start it on a quiet machine: the figures are the
point. The embedded Ray starts in each run, so Ray's start-up is part of the time, as for a user.

Where each second goes (``phases``), from two clocks that need nothing of the project's code: the
time each line of the command's output arrived (the driver's ``starting Ray`` line, the parent
run's line, the live view's first line, the exit) and each trial's ``result.json`` that Ray Tune
writes under ``runs/`` (the array reports its step when it starts training, ``evaluating`` when
its final evaluation starts, and its final result; Tune stamps each with the wall clock and the
seconds since the trial started). Phases, in order: the driver before Ray (imports, the checks,
the plan); Ray's start and the parent run; Tune until the first trial starts; the arrays' start
(Ray Train's controller and workers, imports, the models, the teachers, the data; the slowest
array); training (dev evaluations included); the final evaluation; the end (the last result to
the exit: the report, MLflow, Ray's stop). Arrays that run at once overlap: each phase is read on
the array that ends last, and every trial's own clock is printed below. With more arrays than
run at once (``--array-size 1``) the later rounds wait for the earlier: it says so, and the
per-trial clocks are the reading.

And the CPU seconds of the command's whole process tree by kind of process (``process_cpu.py``):
on a shared machine the wall time is what the other users leave, the CPU seconds are not.
"""

from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(ROOT / "bench"))

from process_cpu import ProcessCpu  # noqa: E402  (bench/ is not a package)


def header(argv: list[str]) -> str:
    import torch

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"# command       python bench/table_timing.py {shlex.join(argv)}\n"
            f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} CPUs, loadavg_1m {load:.1f}")


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20 if path.exists() else 0.0


def _lines(proc: subprocess.Popen, t0: float) -> list[tuple[float, str]]:
    """Every output line with the seconds since ``t0`` it arrived at."""
    assert proc.stdout is not None
    return [(time.monotonic() - t0, line) for line in proc.stdout]


def _first(lines: list[tuple[float, str]], pattern: str) -> float | None:
    return next((t for t, line in lines if re.search(pattern, line)), None)


def trials(runs: Path, epoch0: float) -> list[dict]:
    """Each trial's clock from Tune's result.json, in seconds since the command started."""
    out = []
    for path in sorted(runs.glob("*/*/result.json")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if not rows:
            continue
        # timestamp is whole seconds (rounded down), time_total_s exact since the trial's start:
        # each row bounds the start from below, to within a second; the latest bound is the best
        start = max(r["timestamp"] - r["time_total_s"] for r in rows) - epoch0
        at = lambda r, start=start: start + r["time_total_s"]  # noqa: E731
        training = next((at(r) for r in rows if "total_steps" in r), None)
        evaluating = next((at(r) for r in rows if r.get("evaluating")), None)
        final = next((at(r) for r in rows if r.get("final")), None)
        out.append({"trial": path.parent.name, "start": start, "training": training,
                    "evaluating": evaluating, "final": final})
    return out


def phases(lines: list[tuple[float, str]], wall: float, arrays: list[dict]) -> dict[str, float] | None:
    """Seconds per phase on the critical path (the array that ends last); None when unread."""
    ray = _first(lines, r": starting Ray")
    parent = _first(lines, r"^MLflow parent run")
    done = [a for a in arrays if None not in (a["training"], a["evaluating"], a["final"])]
    if ray is None or parent is None or not done:
        return None
    last = max(done, key=lambda a: a["final"])
    first_start = min(a["start"] for a in arrays)
    return {"driver before Ray (imports, checks, plan)": ray,
            "Ray's start, the parent run": parent - ray,
            "Tune until the first trial": first_start - parent,
            "arrays' start (workers, imports, models, data)": last["training"] - first_start,
            "training (dev evaluations included)": last["evaluating"] - last["training"],
            "final evaluation": last["final"] - last["evaluating"],
            "end (report, MLflow, Ray's stop)": wall - last["final"]}


def run(grid: str, profile: str | None, array_size: str, extra: list[str], cache: Path,
        dry: bool = False) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"table-{array_size}-"))
    cmd = [sys.executable, "-u", "-m", "orchestrator.ablate", "--grid", grid, "--array-size", array_size,
           *(["--profile", str(Path(profile).resolve())] if profile else []), *extra,
           *(["--dry-run"] if dry else [])]
    env = dict(os.environ, MMEMB_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    # The demo corpus lives in the profile's data.cache_dir (default .cache/mmemb under the cwd):
    # link it so every variant reuses one generated corpus.
    (work / ".cache").mkdir()
    (work / ".cache" / "mmemb").symlink_to(cache, target_is_directory=True)
    epoch0, t0 = time.time(), time.monotonic()
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    cpu = ProcessCpu(proc.pid).start()
    lines = _lines(proc, t0)
    proc.wait()
    wall = time.monotonic() - t0
    cpu.stop()
    out = "".join(line for _, line in lines)
    arrays = re.search(r"(\d+) runs in (\d+) arrays? of ([\d-]+) members?", out)
    avg = re.findall(r"^\| (.+?) \| .*\| ([\d.]+±[\d.]+\*?) \|$", out, flags=re.M)
    clocks = [] if dry else trials(work / "runs", epoch0)
    return {"array_size": array_size, "rc": proc.returncode, "wall_s": wall, "work": str(work),
            "arrays": arrays.group(0) if arrays else "?", "avg": avg,
            "phases": None if dry else phases(lines, wall, clocks), "trials": clocks,
            "cpu": cpu.by_kind(), "runs_mb": disk_mb(work / "runs"), "artifacts_mb": disk_mb(work / "mlartifacts"),
            "tail": out[-1500:] if proc.returncode else ""}


def print_phases(r: dict) -> None:
    ph = r["phases"]
    if ph is None:
        print("  phases: not read (no Tune results under runs/, or the driver's lines changed)")
        return
    for name, sec in ph.items():
        print(f"  {name:<48s} {sec:6.1f} s  {sec / r['wall_s']:4.0%}")
    starts = [a["start"] for a in r["trials"]]
    trained = [a["training"] for a in r["trials"] if a["training"] is not None]
    if trained and max(starts) > min(trained):
        print("  note: the arrays ran in rounds (one started after another trained), so the phases above "
              "read the last round only and count the earlier ones as its start; the per-trial clocks "
              "below are the reading")
    else:
        compute = ph["training (dev evaluations included)"] + ph["final evaluation"]
        share = (r["wall_s"] - compute) / compute
        print(f"  FIXED COSTS {share:.0%} of training and final evaluation ({r['wall_s'] - compute:.0f} s "
              f"against {compute:.0f} s; goal: within 20%: {'met' if share <= 0.2 else 'NOT met'})")
    for a in r["trials"]:
        print(f"    {a['trial']}: started {a['start']:.1f} s, training from "
              f"{a['training'] or float('nan'):.1f} s, final evaluation from "
              f"{a['evaluating'] or float('nan'):.1f} s, done at {a['final'] or float('nan'):.1f} s")


def print_cpu(r: dict) -> None:
    """CPU seconds by kind of process: what the load distorts least (bench/process_cpu.py)."""
    total = sum(s for _, s in r["cpu"].values())
    print(f"  CPU seconds of the whole process tree: {total:.0f} s "
          f"(loadavg_1m at the end {os.getloadavg()[0]:.1f})")
    for kind, (n, sec) in r["cpu"].items():
        print(f"    {kind:<22s} {n:3d} process{'es' if n != 1 else '  '} {sec:7.1f} CPU s")


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
        print_phases(r)
        print_cpu(r)
        if r["tail"]:
            print(r["tail"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
