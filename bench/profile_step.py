"""Where one training step's time goes: torch.profiler over ``ArrayTrainer.train_step`` (our loop).

Builds the same synthetic workspace and real ``ArrayTrainer`` as ``bench/train_step.py`` (one
member, or ``--members M`` cycling through ``--method``), runs warm-up steps, then profiles a few
and prints (1) wall time per step against the GPU's busy time per step (kernel time summed), which
tells a launch-bound step from a GPU-bound one, and (2) the operators with the most self CPU time
and the most device time.

    python bench/profile_step.py --device cuda --method mcse --batch-size 128
    python bench/profile_step.py --device cuda --members 20 --method mcse kdmcse dalr --batch-size 64
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.train_step import (  # noqa: E402
    METHODS,
    POOL_ROWS,
    BenchConfig,
    SyntheticData,
    _sync,
    build_ours,
    make_workspace,
)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"],
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--method", nargs="+", choices=METHODS, default=["mcse"],
                   help="member i trains method[i %% len(method)]")
    p.add_argument("--members", type=int, default=1, help="array size M")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--rows", type=int, default=20, help="operators to list per table")
    a = p.parse_args(argv)
    bc = BenchConfig(device=a.device, tiny=a.tiny, methods=tuple(a.method), batch_sizes=(a.batch_size,),
                     compile=a.compile)
    device = torch.device(a.device)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        ws = make_workspace(Path(tmp), bc)
        data = SyntheticData(ws, bc.dims[0], bc.max_length, device, 0, vocab=bc.vocab,
                             clip_text=bc.store == "clip")
        _student, step, _eval, _ckpt = build_ours(bc, ws, data, a.method, a.batch_size, members=a.members)
        for _ in range(a.warmup):
            step(rng.choice(POOL_ROWS, a.batch_size, replace=False))
        batches = [rng.choice(POOL_ROWS, a.batch_size, replace=False) for _ in range(a.steps)]
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda" else [])
        _sync(device)
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            for idx in batches:
                step(idx)
            _sync(device)
            wall = (time.perf_counter() - t0) / a.steps
    events = prof.key_averages()
    busy = sum(e.self_device_time_total for e in events) / 1e3 / a.steps  # us -> ms
    print(f"# M {a.members} of {' '.join(a.method)}, bs {a.batch_size} on {a.device}"
          f"{' (compiled)' if a.compile else ''}, "
          f"{a.steps} profiled steps")
    print(f"wall per step (profiled): {wall * 1e3:.1f} ms; device busy per step: {busy:.1f} ms "
          f"({100 * busy / (wall * 1e3):.0f}%)")
    # ArrayTrainer.train_step's record_function ranges: host time, and on CUDA the kernels inside
    print("phase (per step)            host ms    device ms")
    for e in sorted((e for e in events if e.key.startswith("array/")), key=lambda e: e.key):
        print(f"{e.key:<26} {e.cpu_time_total / 1e3 / a.steps:9.1f} "
              f"{e.device_time_total / 1e3 / a.steps:10.1f}")
    print(events.table(sort_by="self_cpu_time_total", row_limit=a.rows))
    if a.device == "cuda":
        print(events.table(sort_by="self_cuda_time_total", row_limit=a.rows))


if __name__ == "__main__":
    main()
