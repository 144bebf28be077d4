"""One command for a short visit to a GPU: trial arrays against the official loop and its Tune peer.

    python bench/gpu_suite.py --out gpu-suite               # CUDA: the whole suite, < 8 min on an H100
    python bench/gpu_suite.py --device cpu --tiny --out d   # the same rows on a CPU, tiny model

It needs torch and transformers, and numpy, pyarrow and scipy, which the training and evaluation
code imports (``pip install torch transformers pyarrow scipy``; the project need not be installed:
it runs from a clone). It imports nothing of Ray, MLflow or Optuna. It writes ``gpu_suite.json``
(every figure, the plan, the environment) and ``gpu_suite.md`` (the table) into ``--out``, and
prints the table.

Rows, on a random-init BERT-base (hidden 768, 12 layers, vocab 30522; ``--tiny``: hidden 64, 2
layers), batch 64, 32 tokens, both dropout views, caption+image steps, each measured as
``bench/train_step.py`` measures it (its docstring defines the FLOPs and MFU):

1. **official**: the official-style single-run loop, one run per method (fp32: the baseline);
2. **eager arrays** of 1 (one of each method), 5 and 20 mixed MCSE/KDMCSE/DALR members
   (``--precision auto``: bf16 autocast on CUDA), and the same **captured** (``compile=graphs``:
   the whole step, forward to update, one CUDA graph; ``trainables/arrays/capture.py``), with
   MFU against the dense bf16 peak, **x one by one** (the members' step times as arrays of 1 of
   the same compile mode, summed, over the array's) and **x official**;
3. **peers**: what a Ray Tune user would run instead of an array: 4 and 8 official-style runs as
   separate processes sharing the GPU (fractional ``num_gpus``), under CUDA MPS where its daemon
   can be started (else without, and the report says why), their member-steps/s summed;
4. **independence**: a KDMCSE member alone, alone again (the noise floor), inside a mixed array of
   5 and alone with another seed, in bf16 and in the default precision (fp32): every loss term at
   every step and the dev score within the stated tolerance, and another seed outside it;
5. **largest**: the largest mixed array that fits, by a bounded search (the M that fills 95% of
   memory by the measured memory per member, then 10% fewer, at most 3 tries, at most
   ``--largest-cap`` members);
6. **profile**: where the M = 20 step spends its host and device time, phase by phase (the
   step's ``record_function`` ranges under torch's profiler, ``PROFILE_STEPS`` steps), eager and
   captured, on the arrays of 20 the rows above timed (a captured one is not compiled again).

**The plan.** Before anything runs, the script prints each row's expected seconds on the device
and, always, the whole suite's expected wall time on one H100 SXM (989 dense bf16 TFLOP/s), from
the row list and these stated assumptions (estimates, not measurements): start-up (imports, the
random BERT) 30 s; an array step at 25% MFU and at least 40 ms; the official loop at 30 TFLOP/s
(fp32/TF32) and 40 ms at least, 3 s a SentEval evaluation; 1 s + 0.2 s a member to build an array;
a captured array's compilation ``COMPILE_S`` + ``COMPILE_PER_MEMBER_S`` a member (150 s + 5 s:
on one H200 the array of 20 was still compiling after 170 s); a peer row's start-up 90 s (one
H200: the start-up and both peer rows took ~285 s). ``--budget-s`` (default 540 on CUDA: 9
minutes, counted from the process's start, imports included) keeps the rows, in priority order
(``PRIORITY``), that fit, and drops the rest, naming each; a row that would end past the budget
at run time is dropped too, and so is every row once the budget is spent. Each log line is stamped
with the seconds since the start. After every row, ``gpu_suite.partial.json`` holds what was
measured so far (a run killed at its limit keeps its rows); the whole report replaces it. Exits 1
when a member is not independent.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_T0 = time.perf_counter()
"""the process's start (before torch): the budget counts from here, imports included (on a fresh
machine they are not the few seconds they are on a warm one)"""

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a fresh clone: python bench/...
from bench.train_step import (  # noqa: E402
    METHODS,
    STSB_PAIRS,
    BenchConfig,
    SyntheticData,
    _is_oom,
    _sync,
    bench_one,
    build_ours,
    environment,
    label,
    make_workspace,
    peak_flops,
)
from trainables.arrays import capture  # noqa: E402

SUITE_VERSION = 2
H100_PEAK = 989e12
"""dense bf16 FLOP/s of one H100 SXM: the peak the expected wall time is stated against"""
ARRAY_MFU, LAUNCH_FLOOR_S, OFFICIAL_TFLOPS, EVAL_S = 0.25, 0.040, 30.0, 3.0
START_S, BUILD_S, BUILD_PER_MEMBER_S, PEER_START_S = 30.0, 1.0, 0.2, 90.0
COMPILE_S, COMPILE_PER_MEMBER_S = 150.0, 5.0
"""the plan's assumptions (module docstring): estimates. PEER_START_S and the compilation's are
floors from one H200 (2026-11-29): the start-up and the two peer rows took ~285 s together (86 s
planned), and the captured array of 20 was still compiling after 170 s (~100 s planned)"""
FILL, SHRINK, MAX_TRIES = 0.95, 0.9, 3
TOLERANCE = {"bf16": {"rtol": 1e-2, "atol": 1e-2, "dev": 0.5},
             "fp32": {"rtol": 0.0, "atol": 1e-5, "dev": 1e-3}}
UNDER_TEST = 1
"""the member under test: index 1 of the mix (KDMCSE with seed + 1)"""
OTHER_SEED = 100
PROFILE_STEPS = 3
PRIORITY = ("official", "eager 1", "eager 20", "eager 5", "independence bf16", "independence fp32",
            "captured 20", "largest", "peers 8", "peers 4", "captured 5", "captured 1")
"""rows by priority: what ``--budget-s`` keeps first (the cheap rows before the compilation, whose
cost is the least known; the peers last of the measured kinds: their rate was measured on an H200
on 2026-11-29, bench/README.md)"""
DEFAULT_BUDGET_S = 540.0
"""--budget-s on CUDA: 9 minutes from the process's start, one 10-minute visit with a margin"""


@dataclass
class Row:
    """One row of the suite: its name, its planned seconds (on this device and on an H100),
    and what happened to it."""

    name: str
    planned_s: float | None
    h100_s: float
    status: str = "planned"
    """planned, measured, skipped (why in ``note``) or dropped (``--budget-s``)"""
    took_s: float | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------ the plan
def member_flops(bc: BenchConfig, method: str, official: bool = False) -> float:
    """One member-step's FLOPs: the student (6 N T + attention) and, for DALR, its two teachers'
    forward (2 N T each; over both views in the official-style loop)."""
    h, layers, _ = bc.dims
    n = layers * (12 * h * h + 13 * h)  # a BERT layer's weights and biases: 85.05M for BERT-base
    tokens = 2 * bc.batch_sizes[0] * bc.max_length
    f = 6 * n * tokens + 12 * layers * bc.max_length * h * tokens
    if method == "dalr":
        f += 2 * 2 * n * (tokens if official else tokens // 2)
    return f


def plan_rows(bc: BenchConfig, peak: float | None, sizes: Sequence[int], peers: Sequence[int],
              independence_steps: int, largest_guess: int) -> list[Row]:
    """Every row with its planned seconds at ``peak`` (None: no plan on this device) and on an H100."""
    steps = bc.warmup + bc.steps * bc.windows

    def at(pk: float | None) -> dict[str, float | None]:
        if pk is None:
            return {}

        def array_s(mix: Sequence[str], compiled: bool = False, evals: int = 4) -> float:
            f = sum(member_flops(bc, m) for m in mix)
            step = max(LAUNCH_FLOOR_S, f / (pk * ARRAY_MFU))
            s = steps * step + BUILD_S + BUILD_PER_MEMBER_S * len(mix) + evals * 0.2 * len(mix)
            return s + ((COMPILE_S + COMPILE_PER_MEMBER_S * len(mix)) if compiled else 0.0)

        def official_s(m: str, n_steps: int = steps) -> float:
            return (n_steps * max(LAUNCH_FLOOR_S, member_flops(bc, m, True) / (OFFICIAL_TFLOPS * 1e12))
                    + BUILD_S)

        out: dict[str, float | None] = {
            "official": sum(official_s(m) + 4 * EVAL_S for m in bc.methods),
            "largest": 2 * array_s(bc.mix(largest_guess), evals=0),
        }
        for m in sizes:
            mixes = [[x] for x in bc.methods] if m == 1 else [bc.mix(m)]
            out[f"eager {m}"] = sum(array_s(x) for x in mixes)
            out[f"captured {m}"] = sum(array_s(x, compiled=True) for x in mixes)
            if m == max(sizes):  # the profiled array (20): 2 x PROFILE_STEPS more steps each
                step = max(LAUNCH_FLOOR_S, sum(member_flops(bc, x) for x in bc.mix(m)) / (pk * ARRAY_MFU))
                out[f"eager {m}"] += 2 * PROFILE_STEPS * step
                out[f"captured {m}"] += 2 * PROFILE_STEPS * step
        for prec in ("bf16", "fp32"):
            ind = [1, 1, 5, 1]  # alone, alone again, in the array of 5, another seed
            out[f"independence {prec}"] = sum(
                independence_steps * max(LAUNCH_FLOOR_S, k * member_flops(bc, "kdmcse") / (pk * ARRAY_MFU))
                + BUILD_S + BUILD_PER_MEMBER_S * k + 0.2 * k for k in ind)
        for n in peers:
            # the processes share the device: together they take n runs' steps
            out[f"peers {n}"] = PEER_START_S + sum(official_s(m) for m in bc.mix(n))
        return out

    here, h100 = at(peak), at(H100_PEAK)
    names = ["official", *(f"eager {m}" for m in sizes), *(f"captured {m}" for m in sizes),
             "independence bf16", "independence fp32", *(f"peers {n}" for n in peers),
             "largest"]
    return [Row(n, here.get(n), h100[n]) for n in names]


def fit_budget(rows: list[Row], budget_s: float | None, start_s: float = START_S) -> list[str]:
    """Keep the rows that fit ``budget_s`` in ``PRIORITY`` order (planned seconds); mark the rest
    dropped. -> the names dropped."""
    if budget_s is None:
        return []
    used = start_s
    dropped = []
    for r in sorted(rows, key=lambda r: _rank(r.name)):
        need = r.planned_s or 0.0
        if used + need <= budget_s:
            used += need
        else:
            r.status = "dropped"
            planned = "no estimate on this device" if r.planned_s is None else f"planned {need:.0f} s"
            r.note = f"--budget-s {budget_s:g}: {planned}, {max(0.0, budget_s - used):.0f} s left"
            dropped.append(r.name)
    return dropped


def _rank(name: str) -> int:
    return PRIORITY.index(name) if name in PRIORITY else len(PRIORITY)


def h100_expected(rows: Sequence[Row]) -> float:
    return START_S + sum(r.h100_s for r in rows if r.status != "dropped")


def default_on_h100(bc: BenchConfig, budget_s: float = DEFAULT_BUDGET_S) -> dict[str, Any]:
    """What ``python bench/gpu_suite.py --out DIR`` (the defaults: BERT-base, batch 64, 32 tokens,
    5 + 3 x 10 steps a row, peers 4 and 8, --budget-s 540) is expected to take on one H100, from
    its row list: the statement every run prints, whatever its own device and sizes."""
    full = replace(bc, tiny=False, batch_sizes=(64,), max_length=32, steps=10, warmup=5, windows=3,
                   precision="auto")
    rows = plan_rows(full, H100_PEAK, (1, 5, 20), (4, 8), 20, 40)
    for r in rows:
        r.planned_s = r.h100_s
    dropped = fit_budget(rows, budget_s)
    return {"expected_s": h100_expected(rows), "budget_s": budget_s, "dropped": dropped,
            "rows": {r.name: round(r.h100_s, 1) for r in rows}}


# ------------------------------------------------------------------------------ parts
def largest_array(bc: BenchConfig, rows: list[dict], measure: Callable[[int], dict],
                  seconds_left: float, cap: int, log: Callable[[str], None]) -> tuple[dict | None, dict]:
    """Try the M that fills FILL of the device's memory (by the measured memory per member; on a
    CPU the memory available), then SHRINK of it, at most MAX_TRIES times and at most ``cap``
    members; -> (the row that fit or None, what happened)."""
    ours = sorted((r for r in rows if r["loop"] == "ours" and r["compile"] == "off" and r["members"] > 1),
                  key=lambda r: r["members"])
    if len(ours) < 2:
        return None, {"skipped": "needs two mixed array sizes (e.g. 5 and 20) to measure memory per member"}
    a, b = ours[-2], ours[-1]
    per_member = (b["peak_mem_bytes"] - a["peak_mem_bytes"]) / (b["members"] - a["members"])
    fixed = b["peak_mem_bytes"] - per_member * b["members"]
    total = (torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
             if bc.device == "cuda" else _memory_available() + b["peak_mem_bytes"])
    est = int((FILL * total - fixed) // per_member) if per_member > 0 else cap
    info: dict[str, Any] = {"device_bytes": total, "per_member_bytes": per_member, "fixed_bytes": fixed,
                            "estimated": est, "cap": cap, "tried": [], "fit": None}
    m = min(est, cap)
    if m <= b["members"]:
        info["fit"] = b["members"]
        info["note"] = f"no array larger than {b['members']} fits by the measured memory per member"
        return None, info
    step_s = b["step_ms"] / 1e3 / b["members"]  # per member, at the largest measured size
    for _ in range(MAX_TRIES):
        if m <= b["members"]:
            break
        need = (bc.warmup + bc.steps * bc.windows) * step_s * m + BUILD_S + BUILD_PER_MEMBER_S * m + 10
        if need > seconds_left:
            info["skipped"] = (f"an array of {m} would take about {need:.0f} s, {seconds_left:.0f} s "
                               "of --budget-s are left")
            break
        t0 = time.perf_counter()
        try:
            row = measure(m)
            error = None
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            if not _is_oom(e):
                raise
            row, error = None, str(e).splitlines()[0][:200]
        if error is not None:  # outside the except: the traceback no longer holds the array
            gc.collect()
            if bc.device == "cuda":
                torch.cuda.empty_cache()
            log(f"largest array: M {m} out of memory")
            info["tried"].append({"members": m, "fit": False, "error": error})
            seconds_left -= time.perf_counter() - t0
            m = int(m * SHRINK)
            continue
        info["tried"].append({"members": m, "fit": True})
        info["fit"] = m
        row["max"] = True
        return row, info
    if info["fit"] is None:
        info["fit"] = b["members"]
    return None, info


def _memory_available() -> float:
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024.0
    return 8 * 2.0**30


def independence(bc: BenchConfig, ws, data, steps: int, precision: str,
                 log: Callable[[str], None]) -> dict:
    """Member UNDER_TEST alone, alone again, in a mixed array of 5, and alone on another seed,
    with ``precision`` (bf16 or fp32)."""
    bc = replace(bc, precision=precision)
    mix5 = bc.mix(5)
    method, seed = mix5[UNDER_TEST], bc.seed + UNDER_TEST
    tol = TOLERANCE[precision]
    bs = bc.batch_sizes[0]
    gc.collect()
    if bc.device == "cuda":
        torch.cuda.empty_cache()

    def train(methods: list[str], seeds: list[int], pos: int) -> tuple[list[dict[str, float]], float]:
        trainer, step, evaluate, _ = build_ours(bc, ws, data, methods, bs, members=len(methods), seeds=seeds)
        key = [m.key for m in trainer.members][pos]
        curve = []
        for _ in range(steps):
            terms = step()
            curve.append({k: float(v) for k, v in terms[key].items()})
        trainer.model.eval()
        dev = float(evaluate()[pos])
        del trainer, step, evaluate
        gc.collect()
        return curve, dev

    runs = {
        "alone": train([method], [seed], 0),
        "alone again": train([method], [seed], 0),
        "in an array of 5": train(mix5, [bc.seed + i for i in range(5)], UNDER_TEST),
        "another seed": train([method], [seed + OTHER_SEED], 0),
    }

    def distance(name: str) -> dict[str, float]:
        ref, got = runs["alone"], runs[name]
        worst, excess = 0.0, -math.inf
        for a, b in zip(ref[0], got[0], strict=True):
            for term, want in a.items():
                d = abs(b[term] - want)
                worst = max(worst, d)
                excess = max(excess, d - (tol["rtol"] * abs(want) + tol["atol"]))
        dev = abs(got[1] - ref[1])
        return {"max_abs_loss_diff": worst, "within_loss_tolerance": excess <= 0,
                "dev_diff": dev, "within_dev_tolerance": dev <= tol["dev"]}

    out = {name: distance(name) for name in runs if name != "alone"}
    inside = out["in an array of 5"]
    independent = inside["within_loss_tolerance"] and inside["within_dev_tolerance"]
    visible = not (out["another seed"]["within_loss_tolerance"] and out["another seed"]["within_dev_tolerance"])
    verdict = ("independent" if independent and visible else
               "NOT independent" if not independent else
               "inconclusive: another seed is within the tolerance too")
    log(f"independence ({precision}): {verdict}")
    return {"member": {"method": method, "seed": seed, "position_in_array": UNDER_TEST},
            "array_of_5": mix5, "steps": steps, "precision": precision,
            "tolerance": {"loss": "|array - alone| <= " + (f"{tol['rtol']:g} * |alone| + " if tol["rtol"] else "")
                          + f"{tol['atol']:g} per loss term per step", "dev_points": tol["dev"], **tol},
            "comparisons": out, "dev_alone": runs["alone"][1],
            "loss_terms": sorted(runs["alone"][0][0]),
            "curves": {k: [c["total"] for c in v[0]] for k, v in runs.items()},
            "verdict": verdict, "passed": independent and visible}


def profile_phases(trainer, step, bc: BenchConfig) -> dict:
    """Host and device milliseconds per phase of a warm array's step (the step's
    ``record_function`` ranges; bench/profile_step.py's table): ``bench_one``'s ``after``."""
    from torch.profiler import ProfilerActivity, profile

    device = torch.device(bc.device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if bc.device == "cuda" else [])
    _sync(device)
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(PROFILE_STEPS):
            step()
        _sync(device)
        wall = (time.perf_counter() - t0) / PROFILE_STEPS * 1e3
    from torch.autograd import DeviceType

    # From the host's ranges alone: on CUDA each range also comes back as a device-side annotation
    # of the same name (no host time), and a table keyed by name kept that one (host 0.0 on an H200).
    phases: dict[str, dict[str, float | None]] = {}
    for e in prof.events():
        if e.name.startswith("array/") and e.device_type == DeviceType.CPU:
            p = phases.setdefault(e.name.removeprefix("array/"),
                                  {"host_ms": 0.0, "device_ms": 0.0 if bc.device == "cuda" else None})
            p["host_ms"] += e.cpu_time_total / 1e3 / PROFILE_STEPS
            if bc.device == "cuda":  # the kernels launched inside the range, its children's too
                p["device_ms"] += e.device_time_total / 1e3 / PROFILE_STEPS
    # The device's own events, less the annotations: each spans its range's kernels, which the
    # sum of every event's device time counted twice (737 ms of device time a 355 ms step).
    busy = (sum(e.time_range.elapsed_us() for e in prof.events()
                if e.device_type != DeviceType.CPU and not getattr(e, "is_user_annotation", False))
            / 1e3 / PROFILE_STEPS) if bc.device == "cuda" else None
    return {"members": trainer.model.n_members, "compile": trainer.cfg.compile, "wall_ms": wall,
            "device_busy_ms": busy, "phases": phases}


# ------------------------------------------------------------------------------ the peer
def start_mps(root: Path) -> tuple[dict[str, str] | None, str]:
    """Start a CUDA MPS control daemon of our own (its pipe and log folders under ``root``);
    -> (the environment its clients need, or None, and a line saying what happened)."""
    exe = shutil.which("nvidia-cuda-mps-control")
    if exe is None:
        return None, "not started: nvidia-cuda-mps-control is not on PATH"
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(root / "mps-pipe"),
               CUDA_MPS_LOG_DIRECTORY=str(root / "mps-log"))
    for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
        Path(env[k]).mkdir(parents=True, exist_ok=True)
    try:
        p = subprocess.run([exe, "-d"], env=env, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"not started: {type(e).__name__}: {e}"
    if p.returncode != 0:
        return None, f"not started: exit {p.returncode}: {(p.stderr or p.stdout).strip()[:200]}"
    return env, "started (nvidia-cuda-mps-control -d, a pipe folder of this run's)"


def stop_mps(env: dict[str, str] | None) -> None:
    if env is None:
        return
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([shutil.which("nvidia-cuda-mps-control") or "nvidia-cuda-mps-control"],
                       input="quit\n", env=env, capture_output=True, text=True, timeout=20)


def packed_official(bc: BenchConfig, n: int, workdir: Path, log: Callable[[str], None],
                    workspace: Path | None = None, env: dict[str, str] | None = None) -> dict:
    """What a Ray Tune user would run instead of an array: ``n`` official-style runs as separate
    processes on the one device at once (fractional ``num_gpus``; CUDA MPS where ``env`` is its
    clients' environment), their methods cycling as the arrays' do. Each process is
    ``bench/train_step.py --loops official`` (steps only, no evaluation), on the suite's own
    random BERT where ``workspace`` is given; their summed member-steps/s is the figure to set
    beside an array of ``n``."""
    methods = bc.mix(n)
    procs = []
    for i, m in enumerate(methods):
        out = workdir / f"peer{n}_{i}.json"
        cmd = [sys.executable, str(Path(__file__).with_name("train_step.py")), "--device", bc.device,
               "--loops", "official", "--members", "1", "--methods", m, "--no-eval",
               "--batch-sizes", str(bc.batch_sizes[0]), "--max-length", str(bc.max_length),
               "--kind", bc.kind, "--steps", str(bc.steps), "--warmup", str(bc.warmup),
               "--windows", str(bc.windows), "--packed", str(n), "--json", str(out),
               *(["--tiny"] if bc.tiny else []), *(["--workspace", str(workspace)] if workspace else [])]
        penv = dict(env or os.environ)
        if bc.device == "cpu":  # n processes of one thread each: more would fight for the cores
            penv["OMP_NUM_THREADS"] = "1"
        procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                       text=True, env=penv), out))
    step_ms = []
    for proc, out in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"a packed official-style run failed (exit {proc.returncode}): "
                               f"{err.strip().splitlines()[-1] if err.strip() else 'no output'}")
        rows = [r for r in json.loads(out.read_text())["results"] if r["loop"] == "official"]
        step_ms.append(rows[0]["step_ms"])
    total = sum(1e3 / ms for ms in step_ms)
    log(f"peers    {n} official-style processes: {total:7.1f} member-steps/s together")
    return {"processes": n, "methods": dict(Counter(methods)), "step_ms": step_ms,
            "member_steps_per_s": total, "mps": env is not None}


# ------------------------------------------------------------------------------ the report
def add_speedups(rows: list[dict]) -> None:
    """x one by one (the members as arrays of 1 of the same compile mode, else eager ones: the
    basis is named) and x official of every array row."""
    for r in rows:
        if r["loop"] != "ours":
            continue
        for key, loop, modes in (("x_vs_1", "ours", (r["compile"], "off")), ("x_vs_official", "official", ("off",))):
            for mode in dict.fromkeys(modes):
                single = {next(iter(s["methods"])): s["step_ms"] for s in rows if s["loop"] == loop
                          and s["members"] == 1 and s["compile"] == mode}
                if all(m in single for m in r["methods"]):
                    r[key] = sum(c * single[m] for m, c in r["methods"].items()) / r["step_ms"]
                    if key == "x_vs_1":
                        r["x_vs_1_basis"] = f"arrays of 1, compile={mode}"
                    break


def fmt_mib(x: float) -> str:
    return f"{x / 2**20:,.0f}"


def markdown(report: dict) -> str:
    env = report["env"]
    head = ("| loop | compile | M | methods | ms/step | member-steps/s | tokens/s | MFU | peak MiB/member "
            "| x one by one | x official |")
    lines = [f"### gpu_suite on {env['device']} ({env['torch']}, {report['precision']} arrays)", "",
             f"`{env['command']}`, git {env['git']}, {report['date']}", "", head, "|" + "---|" * 11]

    def x(v: float | None) -> str:
        return f"{v:.2f}x" if v is not None else "-"

    for r in report["rows"]:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        m = f"{r['members']}{' (largest)' if r['max'] else ''}"
        lines.append(f"| {r['loop']} | {r['compile']} | {m} | {label(r)} | {r['step_ms']:.1f} | "
                     f"{r['member_steps_per_s']:.1f} | {r['tokens_per_s']:,.0f} | {mfu} | "
                     f"{fmt_mib(r['peak_mem_per_member_bytes'])} | {x(r['x_vs_1'])} | "
                     f"{x(r['x_vs_official'])} |")
    lines.append("")
    arrays = {(r["members"], r["compile"]): r["member_steps_per_s"] for r in report["rows"] if r["loop"] == "ours"}
    peers = report.get("peers", {})
    for peer in peers.get("runs", []):
        n = peer["processes"]
        beside = "".join(f"; an array of {n} ({mode}): {arrays[(n, mode)]:.1f} "
                         f"({arrays[(n, mode)] / peer['member_steps_per_s']:.2f}x)"
                         for mode in ("off", "graphs") if (n, mode) in arrays)
        lines.append(f"- peer (what a Tune user runs): {n} official-style runs as separate processes "
                     f"sharing the device ({label(peer)}; MPS {'on' if peer['mps'] else 'off'}): "
                     f"**{peer['member_steps_per_s']:.1f} member-steps/s** together{beside}")
    if peers.get("mps"):
        lines.append(f"- CUDA MPS: {peers['mps']}")
    for prec, ind in report.get("independence", {}).items():
        c = ind["comparisons"]
        lines.append(
            f"- member independence ({prec}, {ind['steps']} steps, {ind['member']['method']} seed "
            f"{ind['member']['seed']} at position {ind['member']['position_in_array']} of "
            f"{', '.join(ind['array_of_5'])}): **{ind['verdict']}**. Max loss-term difference to the "
            f"member alone: in the array {c['in an array of 5']['max_abs_loss_diff']:.3g}, alone again "
            f"{c['alone again']['max_abs_loss_diff']:.3g}, another seed "
            f"{c['another seed']['max_abs_loss_diff']:.3g}; dev Spearman difference "
            f"{c['in an array of 5']['dev_diff']:.3g} (another seed {c['another seed']['dev_diff']:.3g}); "
            f"tolerance {ind['tolerance']['loss']}, {ind['tolerance']['dev_points']:g} dev points.")
    mx = report.get("largest")
    if mx:
        if mx.get("skipped") and mx.get("fit") is None:
            lines.append(f"- largest array: not searched ({mx['skipped']})")
        else:
            tried = ", ".join(f"{t['members']} {'fit' if t['fit'] else 'out of memory'}" for t in mx.get("tried", []))
            lines.append(f"- largest array: **{mx['fit']}** members (estimated {mx.get('estimated')} from "
                         f"{fmt_mib(mx.get('per_member_bytes', 0))} MiB per member, cap {mx.get('cap')}; "
                         f"tried: {tried or 'none'})" + (f"; {mx['skipped']}" if mx.get("skipped") else "")
                         + (f"; {mx['note']}" if mx.get("note") else ""))
    for prof in report.get("profiles", []):
        dev = prof["device_busy_ms"]
        lines.append(f"- where the array of {prof['members']}'s step goes (compile={prof['compile']}, "
                     f"{PROFILE_STEPS} profiled steps): {prof['wall_ms']:.1f} ms a step"
                     + (f", the device busy {dev:.1f} ms" if dev is not None else "") + "; host / device ms: "
                     + ", ".join(f"{k} {v['host_ms']:.1f} / " + (f"{v['device_ms']:.1f}" if v["device_ms"] is not None
                                                                else "-")
                                 for k, v in sorted(prof["phases"].items())))
    for t in report.get("targets", []):
        lines.append(f"- target (array of 20, compile={t['compile']}): MFU {100 * t['mfu']:.1f}% (>= 35%), "
                     f"{t['x_vs_1']:.2f}x its members one by one (>= 8x)"
                     + (f", {t['x_vs_peer']:.2f}x the 8-process peer (>= 2x)" if t.get("x_vs_peer") else "")
                     + f": {'met' if t['met'] else 'NOT met'}")
    dropped = [r for r in report["plan"]["rows"] if r["status"] in ("dropped", "skipped")]
    if dropped:
        lines.append("- not run: " + "; ".join(f"{r['name']} ({r['note']})" for r in dropped))
    took = ", ".join(f"{r['name']} {r['took_s']:.0f} s" for r in report["plan"]["rows"] if r["took_s"] is not None)
    d = report["plan"]["default_on_h100"]
    lines.append(f"- time: {report['timing_s']['total']:.0f} s in all ({took}); the plan's estimate "
                 f"for these rows on one H100: {report['plan']['h100_expected_s']:.0f} s; for the default "
                 f"command on one H100: {d['expected_s']:.0f} s"
                 + (f" (--budget-s {d['budget_s']:g} drops {', '.join(d['dropped'])})" if d["dropped"] else ""))
    return "\n".join(lines)


# ------------------------------------------------------------------------------ the suite
def run_suite(bc: BenchConfig, command: str, *, independence_steps: int = 20,
              budget_s: float | None = None, workdir: Path | None = None, peers: Sequence[int] = (),
              sizes: Sequence[int] = (1, 5, 20), largest_cap: int = 64,
              log: Callable[[str], None] = lambda s: None, started: float | None = None,
              save: Callable[[dict], None] | None = None) -> dict:
    """Every row that fits ``budget_s``, counted from ``started`` (a ``time.perf_counter()``;
    default now). ``save(partial)`` after each row: what a run killed at its limit has measured."""
    t_start = time.perf_counter() if started is None else started
    peak = peak_flops(bc)[0]
    sizes = sorted(set(sizes))
    rows_plan = plan_rows(bc, peak, sizes, peers, independence_steps, 40)
    dropped = fit_budget(rows_plan, budget_s)
    plan = {r.name: r for r in rows_plan}
    log(f"plan ({len(rows_plan)} rows; seconds on this device, then on one H100 SXM):")
    for r in rows_plan:
        here = f"{r.planned_s:6.0f} s" if r.planned_s is not None else "     - "
        log(f"plan: {r.name:20s} {here}  H100 {r.h100_s:6.0f} s  {r.status}")
    log(f"plan: these rows on one H100, start-up included: {h100_expected(rows_plan):.0f} s"
        + (f"; dropped to fit --budget-s {budget_s:g}: {', '.join(dropped)}" if dropped else ""))
    default = default_on_h100(bc)
    log(f"plan: the default command (python bench/gpu_suite.py --out DIR) on one H100: about "
        f"{default['expected_s']:.0f} s, start-up included (an estimate from its row list)"
        + (f"; --budget-s {default['budget_s']:g} drops {', '.join(default['dropped'])}"
           if default["dropped"] else ""))
    report: dict[str, Any] = {"suite": "gpu_suite", "version": SUITE_VERSION, "date": time.strftime("%Y-%m-%d"),
                              "precision": resolved_precision(bc), "backend": capture.BACKEND,
                              "plan_assumptions": {"array_mfu": ARRAY_MFU, "launch_floor_s": LAUNCH_FLOOR_S,
                                                   "official_tflops": OFFICIAL_TFLOPS, "eval_s": EVAL_S,
                                                   "start_s": START_S, "compile_s": COMPILE_S,
                                                   "compile_per_member_s": COMPILE_PER_MEMBER_S,
                                                   "peer_start_s": PEER_START_S, "h100_peak": H100_PEAK}}
    rows: list[dict] = []

    def left() -> float:
        return (budget_s - (time.perf_counter() - t_start)) if budget_s else math.inf

    def plan_report() -> dict:
        return {"budget_s": budget_s, "dropped": [r.name for r in rows_plan if r.status == "dropped"],
                "h100_expected_s": h100_expected(rows_plan), "default_on_h100": default,
                "rows": [{"name": r.name, "planned_s": r.planned_s, "h100_s": r.h100_s, "status": r.status,
                          "took_s": r.took_s, "note": r.note} for r in rows_plan]}

    def part(name: str, fn: Callable[[], Any]) -> Any:
        r = plan.get(name)
        if r is None or r.status == "dropped":
            return None
        # A row without an estimate (no peak on this device) still stops at the budget's end.
        if (r.planned_s or 0.0) > left() or left() <= 0:
            planned = "no estimate" if r.planned_s is None else f"planned {r.planned_s:.0f} s"
            r.status, r.note = "dropped", f"--budget-s: {planned}, {max(0.0, left()):.0f} s left"
            log(f"dropped: {name} ({r.note})")
            return None
        t = time.perf_counter()
        out = fn()
        r.took_s = time.perf_counter() - t
        if r.status == "planned":
            r.status = "measured"
        if save is not None:  # the rows so far, as the final report will hold them
            save({**report, "rows": list(rows), "partial": True, "plan": plan_report(),
                  "timing_s": {"so_far": time.perf_counter() - t_start}})
        return out

    with tempfile.TemporaryDirectory(prefix="gpu-suite-", dir=workdir) as tmp:
        t0 = time.perf_counter()
        ws = make_workspace(Path(tmp) / "ws", bc)
        timing = {"start": t0 - t_start, "workspace": time.perf_counter() - t0}
        # The peers first: their processes start before this one holds the device (an MPS
        # daemon serves the contexts made after it starts).
        mps_env, mps_line = (None, "not tried: no peer row runs")
        wanted = [n for n in peers if plan[f"peers {n}"].status != "dropped"]
        if wanted and bc.device == "cuda":
            mps_env, mps_line = start_mps(Path(tmp))
            log(f"CUDA MPS: {mps_line}")
        elif wanted:
            mps_line = "not tried: the peers run on a CPU"
        try:
            peer_runs = [out for n in peers if (out := part(f"peers {n}", lambda n=n: packed_official(
                bc, n, Path(tmp), log, Path(tmp) / "ws", mps_env))) is not None]
        finally:
            stop_mps(mps_env)
        report["peers"] = {"runs": peer_runs, "mps": mps_line}
        report["env"] = environment(bc, command)
        data = SyntheticData(ws, bc.dims[0], bc.max_length, torch.device(bc.device), bc.seed, bc.kind,
                             bc.vocab, clip_text=bc.store == "clip")
        once: dict[str, float] = {}
        bs = bc.batch_sizes[0]

        profiles: list[dict] = []

        def row(loop: str, methods: list[str], compiled: bool = False, profile: bool = False) -> dict:
            cb = replace(bc, compile=compiled, compile_mode="reduce-overhead")
            after = (lambda t, s: profile_phases(t, s, bc)) if profile else None
            r = bench_one(cb, ws, data, loop, methods, bs, peak, once, after)
            prof = r.pop("after", None)
            if prof is not None:  # the largest planned array (20): where its step goes
                profiles.append(prof)
            r["member_steps_per_s"] = r["members"] * r["steps_per_s"]
            log(f"{loop:8s} {r['compile']:15s} M {len(methods):4d} {label(r):28s}: "
                f"{r['step_ms']:8.1f} ms/step, {r['member_steps_per_s']:7.1f} member-steps/s"
                + (f" ({r['captured_steps']} captured steps)" if compiled else ""))
            return r

        part("official", lambda: rows.extend(row("official", [m]) for m in bc.methods))
        for m in sizes:
            part(f"eager {m}", lambda m=m: rows.extend(
                [row("ours", [x]) for x in bc.methods] if m == 1
                else [row("ours", bc.mix(m), profile=m == max(sizes))]))
        for m in sorted(sizes, key=lambda m: -m):  # the array of 20 first: the one that matters
            part(f"captured {m}", lambda m=m: rows.extend(
                [row("ours", [x], True) for x in bc.methods] if m == 1
                else [row("ours", bc.mix(m), True, profile=m == max(sizes))]))
        report["profiles"] = profiles
        report["independence"] = {}
        for prec in ("bf16", "fp32"):
            out = part(f"independence {prec}",
                       lambda prec=prec: independence(bc, ws, data, independence_steps, prec, log))
            if out is not None:
                report["independence"][prec] = out

        def search() -> dict:
            best, info = largest_array(bc, rows, lambda m: row("ours", bc.mix(m)), left(), largest_cap, log)
            if best is not None:
                rows.append(best)
            if info.get("skipped") and info.get("fit") is None:
                plan["largest"].status, plan["largest"].note = "skipped", info["skipped"]
            return info

        report["largest"] = part("largest", search)
    add_speedups(rows)
    report["rows"] = rows
    targets = []
    peer8 = next((p for p in report["peers"]["runs"] if p["processes"] == 8), None)
    for r in rows:
        if r["loop"] == "ours" and r["members"] == 20 and r["mfu"] is not None and r["x_vs_1"] is not None:
            x_peer = r["member_steps_per_s"] / peer8["member_steps_per_s"] if peer8 else None
            targets.append({"members": 20, "compile": r["compile"], "mfu": r["mfu"], "x_vs_1": r["x_vs_1"],
                            "x_vs_peer": x_peer, "met": r["mfu"] >= 0.35 and r["x_vs_1"] >= 8.0
                            and (x_peer is None or x_peer >= 2.0)})
    report["targets"] = targets
    timing["total"] = time.perf_counter() - t_start
    report["timing_s"] = timing
    report["plan"] = plan_report()
    report["markdown"] = markdown(report)
    return report


def resolved_precision(bc: BenchConfig) -> str:
    return "bf16" if bc.precision == "bf16" or (bc.precision == "auto" and bc.device == "cuda") else "fp32"


def main(argv: list[str] | None = None) -> int:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=False, default=None,
                   help="folder for gpu_suite.json and gpu_suite.md (created)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if cuda else "cpu")
    p.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers, small batches (a CPU smoke run)")
    p.add_argument("--members", nargs="+", type=int, default=None,
                   help="mixed array sizes besides 1 (default 5 20)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS,
                   help="the mix, in member order (default mcse kdmcse dalr)")
    p.add_argument("--batch-size", type=int, default=None, help="default 64 (16 with --tiny)")
    p.add_argument("--max-length", type=int, default=None, help="default 32 (16 with --tiny)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto",
                   help="our arrays (auto: bf16 autocast on CUDA, fp32 on CPU); the official-style loop is fp32")
    p.add_argument("--steps", type=int, default=None, help="steps per timed window (10; 2 with --tiny)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps per row (5; 3 with --tiny: a captured array's first step is "
                        "eager and its second compiles)")
    p.add_argument("--windows", type=int, default=None, help="timed windows per row (3; 1 with --tiny)")
    p.add_argument("--independence-steps", type=int, default=20)
    p.add_argument("--peak-tflops", type=float, default=None, help="the device's dense bf16 peak, if not detected")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default 1 on a CPU: spinning threads of a shared CPU cost more than they give)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="keep the rows that fit this many seconds, by priority, and name the others "
                        "from the process's start, imports included (default 540 on CUDA: "
                        "9 minutes; none on a CPU)")
    p.add_argument("--peers", nargs="*", type=int, default=[4, 8], metavar="N",
                   help="time N official-style runs as separate processes at once, summed (default 4 8)")
    p.add_argument("--largest-cap", type=int, default=None,
                   help="the largest array the search may try (default 64; 24 with --tiny)")
    p.add_argument("--backend", choices=["inductor", "aot_eager"], default=None,
                   help="torch.compile's backend for captured rows (default inductor on CUDA, "
                        "aot_eager on a CPU: the same capture without minutes of C++ compilation)")
    p.add_argument("--json", type=Path, default=None, help=argparse.SUPPRESS)  # before --out: a file
    a = p.parse_args(argv)
    if a.device == "cuda" and not cuda:
        p.error("--device cuda but torch.cuda.is_available() is False; run on a CUDA machine or use --device cpu --tiny")
    if a.out is None and a.json is None:
        p.error("give --out DIR (the folder for gpu_suite.json and gpu_suite.md)")
    if a.independence_steps < 1:
        p.error("--independence-steps must be >= 1")
    tiny = a.tiny
    if a.threads or a.device == "cpu":
        torch.set_num_threads(a.threads or 1)
    capture.BACKEND = a.backend or ("inductor" if a.device == "cuda" else "aot_eager")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    sizes = tuple(a.members or (5, 20))
    if any(m < 2 for m in sizes):
        p.error("--members lists array sizes >= 2 (arrays of 1 of each method are always timed)")
    if 20 not in sizes and not tiny:  # --tiny: the smoke test's shorter rows, the largest profiled
        p.error("--members must include 20: the profile row and the targets are the array of 20's")
    try:
        bc = BenchConfig(
            device=a.device, tiny=tiny, methods=tuple(a.methods), members=(1, *sizes),
            batch_sizes=(a.batch_size or (16 if tiny else 64),), max_length=a.max_length or (16 if tiny else 32),
            precision=a.precision, peak_tflops=a.peak_tflops,
            steps=a.steps or (2 if tiny else 10), warmup=a.warmup if a.warmup is not None else (3 if tiny else 5),
            windows=a.windows or (1 if tiny else 3),
            eval_pairs=(64, 64, 64) if tiny else STSB_PAIRS)
    except ValueError as err:
        p.error(str(err))
    if bc.warmup < 2:
        p.error("--warmup must be >= 2: a captured array's first step is eager, its second compiles")
    budget = a.budget_s if a.budget_s is not None else (DEFAULT_BUDGET_S if a.device == "cuda" else None)
    command = " ".join(["python", "bench/gpu_suite.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    if any(n < 1 for n in a.peers):
        p.error("--peers lists process counts >= 1")
    cap = a.largest_cap or (24 if tiny else 64)
    target = (a.out / "gpu_suite.json") if a.out else a.json
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.stem + ".partial.json")

    def write(path: Path, report: dict) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n")
        os.replace(tmp, path)

    report = run_suite(bc, command, independence_steps=a.independence_steps, budget_s=budget,
                       peers=a.peers, sizes=(1, *sizes), largest_cap=cap, started=_T0,
                       # each line stamped with the seconds since the process started
                       log=lambda s: print(f"[{time.perf_counter() - _T0:4.0f} s] {s}", file=sys.stderr, flush=True),
                       save=lambda r: write(partial, r))
    print(report["markdown"])
    write(target, report)
    target.with_suffix(".md").write_text(report["markdown"] + "\n")
    partial.unlink(missing_ok=True)  # the whole report replaces what a killed run would leave
    ok = all(ind["passed"] for ind in report["independence"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
