"""One command on a GPU: trial arrays against the official-style loop, and member independence.

    python bench/gpu_suite.py --json gpu_suite.json     # CUDA: the whole suite, one H100 < 8 min
    python bench/gpu_suite.py --device cpu --tiny       # the same parts on a CPU, tiny model (< 1 min)

It needs torch and transformers, and numpy, pyarrow and scipy, which the training and evaluation
code imports (``pip install torch transformers pyarrow scipy``; the project need not be installed:
it runs from a clone). It imports nothing of Ray, MLflow or Optuna. It prints one Markdown table (also written beside
``--json`` as ``.md``) and, with ``--json``, every figure and the environment.

Parts, each printed with its plan before it runs and its time after:

1. **throughput**: a random-init BERT-base (hidden 768, 12 layers, vocab 30522; ``--tiny``: hidden
   64, 2 layers), batch 64, 32 tokens, both dropout views. In one process: the official-style
   single-run loop (fp32, one run per method: the baseline) and ``ArrayTrainer.train_step`` on
   arrays of 1 of each method, then mixed MCSE/KDMCSE/DALR arrays of 5 and 20 (bf16 autocast on
   CUDA). Per row: ms/step, member-steps/s, tokens/s, MFU against the device's dense bf16 peak,
   peak memory per member, the speed-up over the same members trained one by one. Each row is
   ``bench/train_step.py``'s measurement (its docstring defines the FLOPs and MFU).
2. **largest array**: the largest M the device's memory holds. The peak memory of the arrays of
   5 and 20 gives the memory per member; the M that fills 95% of the device is tried, then 10%
   fewer, at most 3 tries, until one fits. Skipped on a CPU (nothing runs out of memory first).
3. **independence**: member 1 of the mix (KDMCSE) trained ``--independence-steps`` (20) steps
   alone, alone again (the noise floor), inside a mixed array of 5 (MCSE, KDMCSE, DALR, MCSE,
   KDMCSE), and alone with another seed (what a real difference looks like). Independent: every
   loss term at every step, and the STS-B dev score after the last step, of the member in the
   array within the tolerance of the member alone. Tolerances, stated: under bf16 autocast
   ``|array - alone| <= 0.01 * |alone| + 0.01`` per loss term and 0.5 points of dev Spearman (an
   array's neighbours must move a member by less than bf16 itself moves fp32; on the CPU bf16
   stays within 0.2% of fp32, tests/trainables/arrays/test_precision.py); in fp32, 1e-5 and 1e-3
   (tests/trainables/arrays/test_trainer.py asks 1e-5 on the CPU). The verdict is "independent"
   only if another seed lies outside the tolerance (else the check could not see a difference).

Budget (CUDA defaults: 10 warm-up + 5 x 20 timed steps per row), from FLOP counts: a BERT-base
member-step is 2.1 TFLOP (6 N T + attention, N = 85.05M, T = 4096 tokens; DALR's two bf16
teachers add 0.7 TFLOP). The plan assumes 25% of the bf16 peak for arrays, at least 40 ms a step
(a single run's step is launch-bound), 30 TFLOP/s for the fp32 official-style loop, and 1 s + 0.2
s per member to build an array. On an H100 SXM that is about 4.5 minutes: official-style 3 x 110
steps + 4 evaluations (~45 s), arrays of 1 (~25 s), 5 (~10 s), 20 (~25 s, 4.6 PFLOP), the largest
(about 35 members, 8 PFLOP, up to 3 tries), independence (80 steps, ~10 s), builds. The script
prints its plan per part before running it and skips the largest-array search when it would end
past ``--budget-s`` (450 s on CUDA).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a fresh clone: python bench/...
from bench.train_step import (  # noqa: E402
    METHODS,
    STSB_PAIRS,
    BenchConfig,
    SyntheticData,
    _is_oom,
    add_speedups,
    bench_one,
    build_ours,
    environment,
    label,
    make_workspace,
    peak_flops,
)

SUITE_VERSION = 1
ARRAY_MFU, LAUNCH_FLOOR_S, OFFICIAL_TFLOPS = 0.25, 0.040, 30.0
"""the plan's assumptions: see the module docstring"""
BUILD_S, BUILD_PER_MEMBER_S = 1.0, 0.2
FILL, SHRINK, MAX_TRIES = 0.95, 0.9, 3
TOLERANCE = {"bf16": {"rtol": 1e-2, "atol": 1e-2, "dev": 0.5},
             "fp32": {"rtol": 0.0, "atol": 1e-5, "dev": 1e-3}}
UNDER_TEST = 1
"""the member under test: index 1 of the mix (KDMCSE with seed + 1)"""
OTHER_SEED = 100


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


def resolved_precision(bc: BenchConfig) -> str:
    return "bf16" if bc.precision == "bf16" or (bc.precision == "auto" and bc.device == "cuda") else "fp32"


# ------------------------------------------------------------------------------ the plan
def plan(bc: BenchConfig, sizes: Sequence[int], peak: float | None, est_max: int,
         independence_steps: int) -> dict[str, dict]:
    """Seconds per part from FLOP counts (module docstring); None on a CPU (no peak to plan by)."""
    steps = bc.warmup + bc.steps * bc.windows
    evals = 4  # a warm-up evaluation and 3 timed ones, per array size

    def array_s(mix: Sequence[str]) -> tuple[float, float]:
        f = sum(member_flops(bc, m) for m in mix)
        step = max(LAUNCH_FLOOR_S, f / (peak * ARRAY_MFU)) if peak else math.nan
        return f * steps, steps * step + BUILD_S + BUILD_PER_MEMBER_S * len(mix)

    parts: dict[str, dict] = {}
    f_off = sum(member_flops(bc, m, official=True) for m in bc.methods) * steps
    s_off = sum(max(LAUNCH_FLOOR_S, member_flops(bc, m, True) / (OFFICIAL_TFLOPS * 1e12))
                for m in bc.methods) * steps + evals * 3.0 + BUILD_S * len(bc.methods)
    parts["official-style loop"] = {"member_steps": steps * len(bc.methods), "flops": f_off,
                                    "planned_s": s_off if peak else None}
    for m in sizes:
        rows = [[x] for x in bc.methods] if m == 1 else [bc.mix(m)]
        f = sum(array_s(r)[0] for r in rows)
        s = sum(array_s(r)[1] for r in rows)
        parts[f"arrays of {m}"] = {"member_steps": steps * m * len(rows), "flops": f,
                                   "planned_s": s if peak else None}
    if est_max:
        f, s = array_s(bc.mix(est_max))
        parts[f"largest array (~{est_max})"] = {"member_steps": steps * est_max, "flops": f,
                                                "planned_s": s if peak else None}
    ind = [1, 1, 5, 1]  # alone, alone again, in the array of 5, another seed
    f = member_flops(bc, "kdmcse") * sum(ind) * independence_steps
    s = sum(max(LAUNCH_FLOOR_S, member_flops(bc, "kdmcse") * k / (peak * ARRAY_MFU)) if peak else 0.0
            for k in ind) * independence_steps + len(ind) * BUILD_S + sum(ind) * BUILD_PER_MEMBER_S
    parts["independence"] = {"member_steps": sum(ind) * independence_steps, "flops": f,
                             "planned_s": s if peak else None}
    return parts


# ------------------------------------------------------------------------------ parts
def largest_array(bc: BenchConfig, rows: list[dict], measure: Callable[[int], dict],
                  seconds_left: float, log: Callable[[str], None]) -> tuple[dict | None, dict]:
    """Try the M that fills FILL of the device's memory (by the measured memory per member), then
    SHRINK of it, at most MAX_TRIES times; -> (the row that fit or None, what happened)."""
    ours = sorted((r for r in rows if r["loop"] == "ours" and r["members"] > 1), key=lambda r: r["members"])
    if bc.device != "cuda":
        return None, {"skipped": "on a CPU nothing runs out of memory first; the largest array is a GPU figure"}
    if len(ours) < 2:
        return None, {"skipped": "needs two mixed array sizes (e.g. 5 and 20) to measure memory per member"}
    a, b = ours[-2], ours[-1]
    per_member = (b["peak_mem_bytes"] - a["peak_mem_bytes"]) / (b["members"] - a["members"])
    fixed = b["peak_mem_bytes"] - per_member * b["members"]
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    est = int((FILL * total - fixed) // per_member) if per_member > 0 else b["members"]
    info: dict[str, Any] = {"device_bytes": total, "per_member_bytes": per_member, "fixed_bytes": fixed,
                            "estimated": est, "tried": [], "fit": None}
    if est <= b["members"]:
        info["fit"] = b["members"]
        info["note"] = f"no array larger than {b['members']} fits by the measured memory per member"
        return None, info
    step_s = b["step_ms"] / 1e3 / b["members"]  # per member, at the largest measured size
    m = est
    for _ in range(MAX_TRIES):
        if m <= b["members"]:
            break
        need = (bc.warmup + bc.steps * bc.windows) * step_s * m + BUILD_S + BUILD_PER_MEMBER_S * m + 30
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


def independence(bc: BenchConfig, ws, data, steps: int, log: Callable[[str], None]) -> dict:
    """Member UNDER_TEST alone, alone again, in a mixed array of 5, and alone on another seed."""
    mix5 = bc.mix(5)
    method, seed = mix5[UNDER_TEST], bc.seed + UNDER_TEST
    precision = resolved_precision(bc)
    tol = TOLERANCE[precision]
    bs = bc.batch_sizes[0]
    gc.collect()  # the largest array's memory, before four more arrays are built
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
    log(f"independence: {verdict}")
    return {"member": {"method": method, "seed": seed, "position_in_array": UNDER_TEST},
            "array_of_5": mix5, "steps": steps, "precision": precision,
            "tolerance": {"loss": "|array - alone| <= " + (f"{tol['rtol']:g} * |alone| + " if tol["rtol"] else "")
                          + f"{tol['atol']:g} per loss term per step", "dev_points": tol["dev"], **tol},
            "comparisons": out, "dev_alone": runs["alone"][1],
            "loss_terms": sorted(runs["alone"][0][0]),
            "curves": {k: [c["total"] for c in v[0]] for k, v in runs.items()},
            "verdict": verdict, "passed": independent and visible}


# ------------------------------------------------------------------------------ the report
def fmt_mib(x: float) -> str:
    return f"{x / 2**20:,.0f}"


def markdown(report: dict) -> str:
    env = report["env"]
    head = ("| loop | M | methods | ms/step | member-steps/s | tokens/s | MFU | peak MiB/member "
            "| x one by one | x official | steps/s with eval |")
    lines = [f"### gpu_suite on {env['device']} ({env['torch']}, {report['precision']} arrays)", "",
             f"`{env['command']}`, git {env['git']}, {report['date']}", "", head,
             "|" + "---|" * 11]

    def x(v: float | None) -> str:
        return f"{v:.2f}x" if v is not None else "-"

    for r in report["rows"]:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        m = f"{r['members']}{' (largest)' if r['max'] else ''}"
        lines.append(f"| {r['loop']} | {m} | {label(r)} | {r['step_ms']:.1f} | "
                     f"{r['member_steps_per_s']:.1f} | {r['tokens_per_s']:,.0f} | {mfu} | "
                     f"{fmt_mib(r['peak_mem_per_member_bytes'])} | {x(r['x_vs_1'])} | "
                     f"{x(r['x_vs_official'])} | {r['steps_per_s_with_eval']:.2f} |")
    lines.append("")
    mx = report["largest"]
    if mx.get("skipped") and mx.get("fit") is None:
        lines.append(f"- largest array: not searched ({mx['skipped']})")
    else:
        tried = ", ".join(f"{t['members']} {'fit' if t['fit'] else 'out of memory'}" for t in mx.get("tried", []))
        lines.append(f"- largest array: **{mx['fit']}** members (estimated {mx.get('estimated')} from "
                     f"{fmt_mib(mx.get('per_member_bytes', 0))} MiB per member; tried: {tried or 'none'})"
                     + (f"; {mx['skipped']}" if mx.get("skipped") else "")
                     + (f"; {mx['note']}" if mx.get("note") else ""))
    ind = report["independence"]
    c = ind["comparisons"]
    lines.append(
        f"- member independence ({ind['precision']}, {ind['steps']} steps, {ind['member']['method']} "
        f"seed {ind['member']['seed']} at position {ind['member']['position_in_array']} of "
        f"{', '.join(ind['array_of_5'])}): **{ind['verdict']}**. Max loss-term difference to "
        f"the member alone: in the array {c['in an array of 5']['max_abs_loss_diff']:.3g}, alone "
        f"again {c['alone again']['max_abs_loss_diff']:.3g}, another seed "
        f"{c['another seed']['max_abs_loss_diff']:.3g}; dev Spearman difference "
        f"{c['in an array of 5']['dev_diff']:.3g} (another seed {c['another seed']['dev_diff']:.3g}); "
        f"tolerance {ind['tolerance']['loss']}, {ind['tolerance']['dev_points']:g} dev points.")
    arrays = {r["members"]: r["member_steps_per_s"] for r in report["rows"] if r["loop"] == "ours"}
    for peer in report.get("peers", []):
        n = peer["processes"]
        beside = (f"; an array of {n}: {arrays[n]:.1f} ({arrays[n] / peer['member_steps_per_s']:.2f}x)"
                  if n in arrays else "")
        lines.append(f"- the peer a Tune user would run: {n} official-style runs as separate processes "
                     f"sharing the device ({label(peer)}): **{peer['member_steps_per_s']:.1f} "
                     f"member-steps/s** together{beside}")
    for target in report.get("targets", []):
        lines.append(f"- target (array of {target['members']}): MFU {100 * target['mfu']:.1f}% (>= 35%), "
                     f"{target['x_vs_1']:.2f}x its members one by one (>= 8x): "
                     f"{'met' if target['met'] else 'NOT met'}")
    timing = report["timing_s"]
    parts = ", ".join(f"{k} {v['took_s']:.0f} s" + (f" (planned {v['planned_s']:.0f})" if v.get("planned_s") else "")
                      for k, v in report["parts"].items() if v.get("took_s") is not None)
    lines.append(f"- time: {timing['total']:.0f} s in all ({parts})")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ the peer
def packed_official(bc: BenchConfig, n: int, workdir: Path, log: Callable[[str], None]) -> dict:
    """What a Ray Tune user would run instead of an array: ``n`` official-style runs as separate
    processes on the one device at once (fractional ``num_gpus``; CUDA MPS where its daemon runs),
    their methods cycling as the arrays' do. Each process is ``bench/train_step.py --loops
    official``; their summed member-steps/s is the figure to set beside an array of ``n``."""
    methods = bc.mix(n)
    procs = []
    for i, m in enumerate(methods):
        out = workdir / f"peer{n}_{i}.json"
        cmd = [sys.executable, str(Path(__file__).with_name("train_step.py")), "--device", bc.device,
               "--loops", "official", "--members", "1", "--methods", m,
               "--batch-sizes", str(bc.batch_sizes[0]), "--max-length", str(bc.max_length),
               "--kind", bc.kind, "--steps", str(bc.steps), "--warmup", str(bc.warmup),
               "--windows", str(bc.windows), "--packed", str(n), "--json", str(out),
               *(["--tiny"] if bc.tiny else [])]
        procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                       text=True), out))
    step_ms = []
    for proc, out in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"a packed official-style run failed (exit {proc.returncode}): "
                               f"{err.strip().splitlines()[-1] if err.strip() else 'no output'}")
        rows = [r for r in json.loads(out.read_text())["results"] if r["loop"] == "official"]
        step_ms.append(rows[0]["step_ms"])
    total = sum(1e3 / ms for ms in step_ms)
    log(f"packed   {n} official-style processes: {total:7.1f} member-steps/s together")
    return {"processes": n, "methods": dict(Counter(methods)), "step_ms": step_ms,
            "member_steps_per_s": total}


# ------------------------------------------------------------------------------ the suite
def run_suite(bc: BenchConfig, command: str, *, independence_steps: int = 20,
              budget_s: float | None = None, workdir: Path | None = None, peers: Sequence[int] = (),
              log: Callable[[str], None] = lambda s: None) -> dict:
    t_start = time.perf_counter()
    peak = peak_flops(bc)[0]
    sizes = sorted({1, *(m for m in bc.members if isinstance(m, int))})
    env = environment(bc, command)
    parts = plan(bc, sizes, peak, 35 if bc.device == "cuda" and not bc.tiny else 0, independence_steps)
    for name, p in parts.items():
        planned = f"{p['planned_s']:.0f} s" if p["planned_s"] is not None else "(no plan on a CPU)"
        log(f"plan: {name:24s} {p['member_steps']:6d} member-steps {p['flops'] / 1e15:7.3f} PFLOP  {planned}")
    rows: list[dict] = []
    timing: dict[str, float] = {}
    report: dict[str, Any] = {"suite": "gpu_suite", "version": SUITE_VERSION, "env": env,
                              "date": time.strftime("%Y-%m-%d"), "precision": resolved_precision(bc),
                              "plan_assumptions": {"array_mfu": ARRAY_MFU, "launch_floor_s": LAUNCH_FLOOR_S,
                                                   "official_tflops": OFFICIAL_TFLOPS}}
    with tempfile.TemporaryDirectory(prefix="gpu-suite-", dir=workdir) as tmp:
        t0 = time.perf_counter()
        ws = make_workspace(Path(tmp), bc)
        data = SyntheticData(ws, bc.dims[0], bc.max_length, torch.device(bc.device), bc.seed, bc.kind,
                             bc.vocab)
        timing["workspace"] = time.perf_counter() - t0
        once: dict[str, float] = {}
        bs = bc.batch_sizes[0]

        def row(loop: str, methods: list[str]) -> dict:
            r = bench_one(bc, ws, data, loop, methods, bs, peak, once)
            r["member_steps_per_s"] = r["members"] * r["steps_per_s"]
            log(f"{loop:8s} M {len(methods):4d} {label(r):28s}: {r['step_ms']:8.1f} ms/step, "
                f"{r['member_steps_per_s']:7.1f} member-steps/s")
            return r

        def part(name: str, fn: Callable[[], Any]) -> Any:
            t = time.perf_counter()
            out = fn()
            parts[name]["took_s"] = time.perf_counter() - t
            return out

        part("official-style loop", lambda: rows.extend(row("official", [m]) for m in bc.methods))
        for m in sizes:
            part(f"arrays of {m}", lambda m=m: rows.extend(
                [row("ours", [x]) for x in bc.methods] if m == 1 else [row("ours", bc.mix(m))]))
        left = (budget_s - (time.perf_counter() - t_start)) if budget_s else math.inf
        t = time.perf_counter()
        best, info = largest_array(bc, rows, lambda m: row("ours", bc.mix(m)), left, log)
        key = next((k for k in parts if k.startswith("largest")), None)
        if key:
            parts[key]["took_s"] = time.perf_counter() - t
        if best is not None:
            rows.append(best)
        report["largest"] = info
        report["independence"] = part("independence", lambda: independence(bc, ws, data, independence_steps, log))
        t = time.perf_counter()
        report["peers"] = [packed_official(bc, n, Path(tmp), log) for n in peers]
        timing["peers"] = time.perf_counter() - t
    add_speedups(rows)
    report["rows"] = rows
    report["parts"] = parts
    targets = []
    for r in rows:
        if r["loop"] == "ours" and r["members"] == 20 and r["mfu"] is not None and r["x_vs_1"] is not None:
            targets.append({"members": 20, "mfu": r["mfu"], "x_vs_1": r["x_vs_1"],
                            "met": r["mfu"] >= 0.35 and r["x_vs_1"] >= 8.0})
    report["targets"] = targets
    timing["total"] = time.perf_counter() - t_start
    report["timing_s"] = timing
    report["markdown"] = markdown(report)
    return report


def main(argv: list[str] | None = None) -> int:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if cuda else "cpu")
    p.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers, small batches (a CPU smoke run)")
    p.add_argument("--members", nargs="+", type=int, default=None,
                   help="array sizes besides 1 (default 5 20); the largest that fits is added on CUDA")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS,
                   help="the mix, in member order (default mcse kdmcse dalr)")
    p.add_argument("--batch-size", type=int, default=None, help="default 64 (16 with --tiny)")
    p.add_argument("--max-length", type=int, default=None, help="default 32 (16 with --tiny)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto",
                   help="our arrays (auto: bf16 autocast on CUDA, fp32 on CPU); the official-style loop is fp32")
    p.add_argument("--steps", type=int, default=None, help="steps per timed window (20; 2 with --tiny)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per row (10; 1 with --tiny)")
    p.add_argument("--windows", type=int, default=None, help="timed windows per row (5; 1 with --tiny)")
    p.add_argument("--independence-steps", type=int, default=20)
    p.add_argument("--peak-tflops", type=float, default=None, help="the device's dense bf16 peak, if not detected")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default 1 on a CPU: spinning threads of a shared CPU cost more than they give)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="skip the largest-array search when it would end past this (default 450 on CUDA)")
    p.add_argument("--json", type=Path, default=None, help="write the report here (and the table beside it as .md)")
    p.add_argument("--peers", nargs="*", type=int, default=None, metavar="N",
                   help="also time N official-style runs as separate processes at once, summed "
                        "(default 4 8 on CUDA, none on a CPU)")
    a = p.parse_args(argv)
    if a.device == "cuda" and not cuda:
        p.error("--device cuda but torch.cuda.is_available() is False; run on a CUDA machine or use --device cpu --tiny")
    if a.independence_steps < 1:
        p.error("--independence-steps must be >= 1")
    tiny = a.tiny
    if a.threads or a.device == "cpu":
        torch.set_num_threads(a.threads or 1)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    sizes = tuple(a.members or (5, 20))
    if any(m < 2 for m in sizes):
        p.error("--members lists array sizes >= 2 (arrays of 1 of each method are always timed)")
    try:
        bc = BenchConfig(
            device=a.device, tiny=tiny, methods=tuple(a.methods), members=(1, *sizes),
            batch_sizes=(a.batch_size or (16 if tiny else 64),), max_length=a.max_length or (16 if tiny else 32),
            precision=a.precision, peak_tflops=a.peak_tflops,
            steps=a.steps or (2 if tiny else 20), warmup=a.warmup if a.warmup is not None else (1 if tiny else 10),
            windows=a.windows or (1 if tiny else 5),
            eval_pairs=(64, 64, 64) if tiny else STSB_PAIRS)
    except ValueError as err:
        p.error(str(err))
    budget = a.budget_s if a.budget_s is not None else (450.0 if a.device == "cuda" else None)
    command = " ".join(["python", "bench/gpu_suite.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    peers = a.peers if a.peers is not None else ([4, 8] if a.device == "cuda" else [])
    if any(n < 1 for n in peers):
        p.error("--peers lists process counts >= 1")
    report = run_suite(bc, command, independence_steps=a.independence_steps, budget_s=budget,
                       peers=peers, log=lambda s: print(s, file=sys.stderr, flush=True))
    print(report["markdown"])
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = a.json.with_name(a.json.name + ".tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n")
        os.replace(tmp, a.json)
        a.json.with_suffix(".md").write_text(report["markdown"] + "\n")
    return 0 if report["independence"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
