"""What the looped fallback costs: ``ArrayTrainer`` steps of a stacked array against a looped one.

    python bench/looped_step.py --members 1 5 10

The same student twice: the demo's (MiniLM-L6's top layer, a BERT, trained as a stacked array)
and the same function written as a DistilBERT (``minilm-l6-top1-distilbert``, which the stacked
encoder cannot express, so it trains through ``trainables/arrays/looped.py``). For each array
size M, both arrays of M KDMCSE members (seeds 0..M-1, the demo profile and data) are built, and
their ``train_step`` is timed in alternating windows, so both see the same machine load; then
``evaluate_dev`` (STS-B dev of every member). Prints ms/step, ms per member and step, and x1: M
times the step of an array of 1 of the same backend over the step of the array of M (what the
array gains over its members trained one at a time in one process; per-run start-up, which an
array also saves, is not in it: ``table_timing.py`` has whole tables).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ENCODERS = {"stacked": "minilm-l6-top1", "looped": "minilm-l6-top1-distilbert"}


def header(argv: list[str]) -> str:
    import torch
    import transformers

    try:
        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True).stdout.strip()
    except OSError:
        git = "?"
    return "\n".join([
        f"# command       python bench/looped_step.py {shlex.join(argv)}",
        f"# git           {git}",
        f"# torch         {torch.__version__}, transformers {transformers.__version__}",
        f"# device        {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
        + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""),
        f"# torch_threads {torch.get_num_threads()}",
        f"# loadavg_1m    {os.getloadavg()[0]:.2f}",
    ])


def build(backend: str, m: int, cache: str, device: str):
    from trainables.arrays.trainer import ArrayTrainer
    from trainables.config.profiles import build_config

    members = [(f"s{i}", build_config("demo", "kdmcse", {"encoder": ENCODERS[backend], "seed": i,
                                                         "data.cache_dir": cache}))
               for i in range(m)]
    t = ArrayTrainer(members, device=device)
    t.model.train()
    return t


def _sync(t) -> None:
    import torch

    if t.device.type == "cuda":
        torch.cuda.synchronize(t.device)


def time_steps(t, steps: int) -> float:
    _sync(t)
    t0 = time.perf_counter()
    for _ in range(steps):
        t.train_step()
    _sync(t)
    return (time.perf_counter() - t0) / steps


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, nargs="+", default=[1, 5, 10])
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=4, help="steps per timed window")
    p.add_argument("--windows", type=int, default=3, help="timed windows per backend, alternating")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda (bf16 autocast there, as training)")
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "mmemb-bench-cache"))
    args = p.parse_args(argv)
    if (args.warmup + args.steps * args.windows) > 60:
        p.error("warmup + steps * windows must stay within the demo's 60 steps")
    import torch

    torch.set_num_threads(args.threads)
    print(header(argv), flush=True)
    rows = []
    for m in args.members:
        trainers = {b: build(b, m, args.cache_dir, args.device) for b in ENCODERS}
        for t in trainers.values():
            time_steps(t, args.warmup)
        times: dict[str, list[float]] = {b: [] for b in trainers}
        for _ in range(args.windows):
            for b, t in trainers.items():
                times[b].append(time_steps(t, args.steps))
        for b, t in trainers.items():
            evals = []
            for _ in range(2):
                _sync(t)
                t0 = time.perf_counter()
                t.evaluate_dev()
                _sync(t)
                evals.append(time.perf_counter() - t0)
            rows.append((b, m, statistics.median(times[b]), min(evals)))
            print(f"  measured {b} M={m}: {statistics.median(times[b]) * 1e3:.0f} ms/step", flush=True)
        del trainers
        gc.collect()
    one = {b: s for b, m, s, _ in rows if m == 1}
    print(f"{'backend':<8s} {'M':>3s} {'ms/step':>9s} {'ms/member':>10s} {'x1':>6s} {'eval s':>7s}")
    print("-" * 48)
    for b, m, s, e in rows:
        x1 = f"{m * one[b] / s:6.2f}" if b in one else "     -"
        print(f"{b:<8s} {m:>3d} {s * 1e3:9.1f} {s * 1e3 / m:10.1f} {x1} {e:7.2f}")
    print(f"# loadavg_1m at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
