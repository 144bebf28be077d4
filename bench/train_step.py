"""Time one training step of MCSE / KDMCSE / DALR: our loop against an official-style loop.

Issue 4 ("Fast on a GPU"). For each method and batch size, in one process, it times
  (a) ours: ``trainables.loop.Trainer.train_step`` itself (bf16 autocast on CUDA, fused AdamW,
      CLIP features already on the device, text teachers in bf16, one host sync per step for the
      finite check; token ids copied host->device non-blocking, as ``TrainingData.batch`` does),
      plus ``Trainer.evaluate_dev`` every 125 steps (STS-B dev only, tokenised once);
  (b) official-style (docs/official-code.md §2.3): fp32, unfused AdamW (foreach=False), fp32 teachers run on
      both dropout views, features copied host->device from NumPy each step, ``loss.item()`` each
      step, and SentEval's STS-B evaluation every 125 steps (train + dev + test, 8628 pairs, sorted
      by length, tokenised per batch of 128, fp32).
Evaluation is amortised into "steps/s +eval": 1 / (step + eval / 125), eval = the median of 3
calls after a warm-up call, measured once per loop (the encoder is the same for every method).

Data are synthetic (no files needed): a random-init BERT (base: hidden 768, 12 layers, 12 heads,
vocab 30522; ``--tiny``: hidden 64, 2 layers, 4 heads) saved to a temp folder with the test
tokenizer of ``trainables.testing``, random token ids (full ``max_length`` rows, no padding),
random 768-d (tiny: 64-d) CLIP features, random STS-B-sized sentence pairs. DALR's two teachers are
the same random BERT under the folder names ``simcse`` / ``DiffCSE`` (so ``cls_before_pooler``).

FLOPs of the student's forward+backward per step (heads and teachers not counted):
    F = 6 * N * T + 12 * n_layers * L * h * T,   T = 2 * bs * L tokens (two dropout views),
N = the encoder's non-embedding parameters (``encoder.encoder``: 85.05M for BERT-base); the second
term is QK^T and AV (2 matmuls x 2 FLOPs x L x h per token, x3 for forward+backward).
MFU = F / (median train-step time * peak); peak = dense bf16 tensor-core FLOP/s detected from the
GPU name (H100 SXM / H200: 989 TFLOP/s; PCIe 756; NVL 835; A100 312), or ``--peak-tflops``.
Commands: bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

from trainables import loop as loop_mod
from trainables.config import RunConfig
from trainables.data import Batch
from trainables.evaluation import cosine_rows, spearman100
from trainables.model import Student, StudentConfig
from trainables.objectives import ObjectiveConfig, TeacherInputs, compute_objective
from trainables.teachers import TextTeacher
from trainables.testing import WORDS, write_bert_tokenizer

METHODS = ("mcse", "kdmcse", "dalr")
LOOPS = ("ours", "official")
STSB_PAIRS = (5749, 1500, 1379)
"""STS-B train / dev / test pairs: SentEval's STSBenchmarkEval encodes all three at every eval."""
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0),
                    ("A100", 312.0))
"""Dense (no sparsity) bf16 peaks from NVIDIA's data sheets, matched in order in the device name."""
TEACHER_DIRS = ("simcse", "DiffCSE")
POOL_ROWS = 2048
LR, ADAM_EPS, CLIP = 3e-5, 1e-6, 1.0  # official recipe (docs/official-code.md §2.3)


@dataclass(frozen=True)
class BenchConfig:
    device: str = "cpu"
    tiny: bool = False
    """hidden 64, 2 layers, 4 heads instead of BERT-base"""
    methods: tuple[str, ...] = METHODS
    batch_sizes: tuple[int, ...] = (64, 128)
    max_length: int = 32
    kind: str = "pair"
    """'pair' (caption+image batch: the method's full objective) or 'text' (SimCSE-style batch)"""
    warmup: int = 5
    steps: int = 10
    """steps per timed window; the reported step time is the median over ``windows``"""
    windows: int = 3
    eval_every: int = 125
    eval_pairs: tuple[int, int, int] = STSB_PAIRS
    compile: bool = False
    """torch.compile our student's encoder (in place; the official-style loop never compiles)"""
    compile_mode: str = "default"
    """torch.compile mode: 'default', or 'reduce-overhead' (CUDA graphs: fewer launches)"""
    peak_tflops: float | None = None
    loops: tuple[str, ...] = LOOPS
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [m for m in self.methods if m not in METHODS] + [x for x in self.loops if x not in LOOPS]
        if bad or not self.methods or not self.loops:
            raise ValueError(f"unknown method/loop {bad}; methods from {METHODS}, loops from {LOOPS}")
        if self.device not in ("cpu", "cuda") or self.kind not in ("pair", "text"):
            raise ValueError(f"device={self.device!r} kind={self.kind!r}; use cpu|cuda and pair|text")
        if min(self.batch_sizes, default=0) < 2 or max(self.batch_sizes) > POOL_ROWS:
            raise ValueError(f"batch sizes {self.batch_sizes} must lie in [2, {POOL_ROWS}]")
        if min(self.steps, self.windows, self.eval_every, *self.eval_pairs) < 1 or self.warmup < 0:
            raise ValueError("steps, windows, eval_every and eval_pairs must be >= 1, warmup >= 0")
        if not 2 <= self.max_length <= 512:
            raise ValueError(f"max_length={self.max_length} must lie in [2, 512]")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' but torch.cuda.is_available() is False; use --device cpu --tiny")


# ------------------------------------------------------------------------------ synthetic inputs
@dataclass
class Workspace:
    root: Path
    encoder: Path
    teachers: tuple[str, ...]
    senteval: Path
    splits: dict[str, tuple[list[tuple[str, str]], np.ndarray]]


def _sentences(rng: np.random.Generator, n: int) -> list[str]:
    # 4-20 words: about STS-B's length; every test word is one WordPiece.
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 21)))) for _ in range(n)]


def make_workspace(root: Path, bc: BenchConfig) -> Workspace:
    """Random BERT folder, two teacher links to it, and synthetic STS-B files."""
    from transformers import BertConfig, BertModel

    h, layers, heads = (64, 2, 4) if bc.tiny else (768, 12, 12)
    enc = write_bert_tokenizer(root / "encoder")
    torch.manual_seed(bc.seed)
    BertModel(BertConfig(vocab_size=30522, hidden_size=h, num_hidden_layers=layers,
                         num_attention_heads=heads, intermediate_size=4 * h)).save_pretrained(enc)
    teachers = []
    for name in TEACHER_DIRS:
        (root / name).symlink_to(enc, target_is_directory=True)
        teachers.append(str(root / name))
    rng = np.random.default_rng(bc.seed)
    sts = root / "senteval" / "STS" / "STSBenchmark"
    sts.mkdir(parents=True)
    splits = {}
    for split, n in zip(("train", "dev", "test"), bc.eval_pairs, strict=True):
        pairs = list(zip(_sentences(rng, n), _sentences(rng, n), strict=True))
        gold = rng.uniform(0.0, 5.0, n)
        rows = [f"g\tf\t2012\t{i}\t{g:.3f}\t{a}\t{b}" for i, ((a, b), g) in enumerate(zip(pairs, gold, strict=True))]
        (sts / f"sts-{split}.csv").write_text("\n".join(rows) + "\n")
        splits[split] = (pairs, gold)
    return Workspace(root, enc, tuple(teachers), root / "senteval", splits)


class SyntheticData:
    """Stands in for ``TrainingData``: token ids on the host (as the tokenizer returns them) and
    CLIP features both on the device (ours) and as NumPy arrays (official-style)."""

    pairs = None
    teacher_columns: tuple[str, ...] = ()

    def __init__(self, ws: Workspace, dim: int, max_length: int, device: torch.device, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(5, 30522, (POOL_ROWS, max_length), generator=g)
        self.ids[:, 0], self.ids[:, -1] = 2, 3  # [CLS] ... [SEP] of the test vocabulary
        self.mask = torch.ones_like(self.ids)
        self.image_np = torch.randn(POOL_ROWS, dim, generator=g).numpy()
        self.clip_np = torch.randn(POOL_ROWS, dim, generator=g).numpy()
        self.image = torch.from_numpy(self.image_np).to(device)
        self.clip = torch.from_numpy(self.clip_np).to(device)
        self.senteval_dir = ws.senteval
        self.n_text, self.n_pair = 8 * POOL_ROWS, POOL_ROWS
        self.image_dim = self.clip_text_dim = dim

    def batch(self, kind: str, indices: np.ndarray, tokenize, device: torch.device) -> Batch:
        idx = torch.from_numpy(np.asarray(indices))
        ids = self.ids[idx].to(device, non_blocking=True)  # as TrainingData.batch
        mask = self.mask[idx].to(device, non_blocking=True)
        if kind == "text":
            return Batch(kind, ids, mask)
        d = idx.to(self.image.device, non_blocking=True)  # no stream sync the real loop lacks
        return Batch(kind, ids, mask, image=self.image[d], clip_text=self.clip[d])


# ------------------------------------------------------------------------------ the two loops
def build_ours(bc: BenchConfig, ws: Workspace, data: SyntheticData, method: str, bs: int):
    """The real ``Trainer`` (model, teachers, fused AdamW, DevEvaluator) on synthetic data."""
    cfg = RunConfig(objective=ObjectiveConfig(method=method), encoder=str(ws.encoder),
                    text_teachers=ws.teachers if method == "dalr" else (), batch_size=bs,
                    max_length=bc.max_length, max_steps=10**9, seed=bc.seed, final_eval=False)
    with mock.patch.object(loop_mod, "load_data", lambda _cfg: data):
        trainer = loop_mod.Trainer(cfg, device=bc.device)
    if bc.compile:
        trainer.student.encoder.compile(mode=bc.compile_mode)  # in place: state_dict keys and evaluate_dev unchanged
    trainer.student.train()

    def checkpoint() -> None:  # what Trainer._eval_and_report writes at every evaluation
        path = ws.root / f"ckpt-{method}-{bs}"
        trainer.save_state(path)
        shutil.rmtree(path)

    return (trainer.student, (lambda idx: trainer.train_step(bc.kind, idx)), trainer.evaluate_dev,
            checkpoint)


class OfficialStep:
    """``train_mix.py``'s step as the official repos run it (docs/official-code.md §2.3, §6.1)."""

    def __init__(self, bc: BenchConfig, ws: Workspace, data: SyntheticData, method: str):
        self.device, self.kind, self.data = torch.device(bc.device), bc.kind, data
        self.obj = ObjectiveConfig(method=method).resolved()
        torch.manual_seed(bc.seed)
        self.student = Student(StudentConfig(
            encoder=str(ws.encoder), method=method, image_dim=data.image_dim,
            clip_text_dim=data.clip_text_dim if self.obj.clip_text_term else None,
        )).to(self.device).train()
        self.teachers = ([TextTeacher(p, dtype=torch.float32, device=self.device) for p in ws.teachers]
                         if method == "dalr" else [])
        self.opt = torch.optim.AdamW(self.student.trainable_parameters(), lr=LR, eps=ADAM_EPS,
                                     weight_decay=0.0, foreach=False, fused=False)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: max(0.0, 1 - s / 10**9))
        self.loss = 0.0

    def __call__(self, idx: np.ndarray) -> None:
        d, t_idx = self.device, torch.from_numpy(idx)
        ids, mask = self.data.ids[t_idx].to(d), self.data.mask[t_idx].to(d)
        teacher = image = clip = None
        if self.kind == "pair":  # the collator builds features on the host; moved every step
            image = torch.from_numpy(self.data.image_np[idx]).to(d)
            clip = torch.from_numpy(self.data.clip_np[idx]).to(d)
        out = self.student(ids, mask, image=image, clip_text=clip)
        if self.kind == "pair":
            embs, local = [], []
            ids2, mask2 = ids.repeat_interleave(2, 0), mask.repeat_interleave(2, 0)
            for t in self.teachers:  # DALR's teachers see both (identical) views: 2*bs rows
                e, loc = t.encode_ids(ids2, mask2)
                embs.append(e[::2])
                local.append(loc[::2])
            teacher = TeacherInputs(image=image, clip_text=clip, text_teachers=tuple(embs),
                                    text_teacher_local=tuple(local))
        loss = compute_objective(self.obj, out, teacher)["total"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.student.parameters(), CLIP)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        self.loss = loss.item()  # logged every step: a host sync


def official_eval(student: Student, splits: dict, batch_size: int = 128) -> float:
    """SentEval ``STSBenchmarkEval.run``: all splits, sorted by length, tokenised per batch, fp32."""
    scores = {}
    for name, (pairs, gold) in splits.items():
        order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0].split()),
                                                         len(pairs[i][1].split()), gold[i]))
        sides: tuple[list, list] = ([], [])
        for s in range(0, len(order), batch_size):
            chunk = [pairs[i] for i in order[s : s + batch_size]]
            for k in (0, 1):
                tok = student.tokenizer([p[k] for p in chunk], padding=True, return_tensors="pt")
                emb = student.encode_ids(tok["input_ids"], tok["attention_mask"])
                sides[k].append(emb.cpu().numpy())
        scores[name] = spearman100(cosine_rows(*map(np.concatenate, sides)), gold[order])
    return scores["dev"]


# ------------------------------------------------------------------------------ measurement
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    else:
        with contextlib.suppress(OSError):  # Linux: "5" resets VmHWM (peak RSS) to the current RSS
            Path("/proc/self/clear_refs").write_text("5")


def _peak_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def time_windows(step: Callable[[np.ndarray], object], bc: BenchConfig, bs: int) -> list[float]:
    """Seconds per step in each timed window, after ``warmup`` untimed steps."""
    device, rng = torch.device(bc.device), np.random.default_rng(bc.seed)
    for _ in range(bc.warmup):
        step(rng.choice(POOL_ROWS, bs, replace=False))
    out = []
    for _ in range(bc.windows):
        batches = [rng.choice(POOL_ROWS, bs, replace=False) for _ in range(bc.steps)]
        _sync(device)
        t0 = time.perf_counter()
        for idx in batches:
            step(idx)
        _sync(device)
        out.append((time.perf_counter() - t0) / bc.steps)
    return out


def timed(fn: Callable[[], object], device: torch.device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def student_flops(student: Student, bs: int, length: int) -> float:
    """F = 6 N T + 12 n_layers L h T, T = 2 bs L (module docstring)."""
    n = sum(p.numel() for p in student.encoder.encoder.parameters())
    cfg, tokens = student.encoder.config, 2 * bs * length
    return 6.0 * n * tokens + 12.0 * cfg.num_hidden_layers * length * cfg.hidden_size * tokens


def peak_flops(bc: BenchConfig) -> tuple[float | None, str]:
    if bc.peak_tflops:
        return bc.peak_tflops * 1e12, f"{bc.peak_tflops:g} TFLOP/s (--peak-tflops)"
    if bc.device != "cuda":
        return None, "none on CPU (pass --peak-tflops for an MFU)"
    name = torch.cuda.get_device_name()
    for key, tf in PEAK_BF16_TFLOPS:
        if key in name:
            return tf * 1e12, f"{tf:g} TFLOP/s dense bf16 ({key})"
    return None, f"unknown for {name!r}; pass --peak-tflops"


def bench_one(bc: BenchConfig, ws: Workspace, data: SyntheticData, loop: str, method: str,
              bs: int, peak: float | None, once: dict[str, float]) -> dict:
    device = torch.device(bc.device)
    if bc.compile:
        torch._dynamo.reset()  # a fresh model per row: drop the previous row's graphs
    _reset_peak(device)
    if loop == "ours":
        student, step, evaluate, checkpoint = build_ours(bc, ws, data, method, bs)
    else:
        runner = OfficialStep(bc, ws, data, method)
        student, step = runner.student, runner
        evaluate = lambda: official_eval(runner.student, ws.splits)  # noqa: E731
        checkpoint = None
    windows = time_windows(step, bc, bs)
    mem = _peak_bytes(device)
    if loop not in once:  # the encoder is the same for every method and batch size
        evaluate()  # warm-up (cuBLAS heuristics, compile)
        once[loop] = statistics.median(timed(evaluate, device) for _ in range(3))
    if checkpoint is not None and method not in once:  # its size depends on the heads only
        once[method] = timed(checkpoint, device)
    step_s, eval_s = statistics.median(windows), once[loop]
    flops, tokens = student_flops(student, bs, bc.max_length), 2 * bs * bc.max_length
    del student, step, evaluate, checkpoint
    return {
        "loop": loop, "method": method, "batch_size": bs, "max_length": bc.max_length,
        "kind": bc.kind, "step_ms": step_s * 1e3, "window_ms": [w * 1e3 for w in windows],
        "steps_per_s": 1 / step_s, "steps_per_s_with_eval": 1 / (step_s + eval_s / bc.eval_every),
        "tokens_per_s": tokens / step_s, "flops_per_step": flops, "tflops": flops / step_s / 1e12,
        "mfu": flops / step_s / peak if peak else None, "peak_mem_bytes": mem, "eval_s": eval_s,
        "eval_sentences": 2 * (sum(bc.eval_pairs) if loop == "official" else bc.eval_pairs[1]),
        "checkpoint_s": once[method] if loop == "ours" else None,
    }


def environment(bc: BenchConfig, command: str) -> dict:
    import transformers

    if bc.device == "cuda":
        name = torch.cuda.get_device_name()
    else:
        cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
        name = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines()
                     if ln.startswith("model name")), platform.processor() or "cpu")
    git = ""
    with contextlib.suppress(OSError):  # no git binary or no .git on a copied tree
        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=Path(__file__).parent, check=False).stdout.strip()
    return {"command": command, "git": git or None, "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "cuda": torch.version.cuda, "device": name, "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(), "loadavg_1m": os.getloadavg()[0],
            "peak": peak_flops(bc)[1], "config": asdict(bc)}


def run_benchmark(bc: BenchConfig, command: str = "", workdir: Path | None = None,
                  log: Callable[[str], None] = lambda s: None) -> dict:
    """Every (loop, method, batch size) row, the speed-ups of ours over official, the environment."""
    peak = peak_flops(bc)[0]
    with tempfile.TemporaryDirectory(prefix="bench-train-step-", dir=workdir) as tmp:
        ws = make_workspace(Path(tmp), bc)
        data = SyntheticData(ws, 64 if bc.tiny else 768, bc.max_length, torch.device(bc.device), bc.seed)
        rows, once = [], {}
        for method in bc.methods:
            for bs in bc.batch_sizes:
                for loop in bc.loops:
                    r = bench_one(bc, ws, data, loop, method, bs, peak, once)
                    log(f"{loop:8s} {method:6s} bs {bs:3d}: {r['step_ms']:8.1f} ms/step")
                    rows.append(r)
    by = {(r["loop"], r["method"], r["batch_size"]): r for r in rows}
    speedups = [{"method": m, "batch_size": b,
                 "train": by["ours", m, b]["steps_per_s"] / by["official", m, b]["steps_per_s"],
                 "with_eval": by["ours", m, b]["steps_per_s_with_eval"]
                 / by["official", m, b]["steps_per_s_with_eval"]}
                for m in bc.methods for b in bc.batch_sizes if len(bc.loops) == 2]
    return {"env": environment(bc, command), "results": rows, "speedups": speedups}


def format_report(report: dict) -> str:
    head = (f"{'loop':8s} {'method':6s} {'bs':>4s} {'ms/step':>8s} {'steps/s':>8s} {'+eval':>7s} "
            f"{'tokens/s':>9s} {'TFLOP/s':>8s} {'MFU':>6s} {'peak MiB':>9s} {'eval s':>7s}")
    lines = [head, "-" * len(head)]
    for r in report["results"]:
        mfu = f"{100 * r['mfu']:5.1f}%" if r["mfu"] is not None else f"{'-':>6s}"
        lines.append(
            f"{r['loop']:8s} {r['method']:6s} {r['batch_size']:4d} {r['step_ms']:8.1f} "
            f"{r['steps_per_s']:8.2f} {r['steps_per_s_with_eval']:7.2f} {r['tokens_per_s']:9.0f} "
            f"{r['tflops']:8.3f} {mfu} {r['peak_mem_bytes'] / 2**20:9.0f} {r['eval_s']:7.2f}")
    ckpt = {r["method"]: r["checkpoint_s"] for r in report["results"] if r["checkpoint_s"]}
    if ckpt:
        lines.append("ours: Trainer.save_state at every eval (not in +eval): " + ", ".join(
            f"{m} {s:.2f} s" for m, s in ckpt.items()))
    if report["speedups"]:
        lines += ["", "speed-up of ours over official-style (steps/s): train only | with eval"]
        lines += [f"  {s['method']:6s} bs {s['batch_size']:3d}: {s['train']:5.2f}x | {s['with_eval']:5.2f}x"
                  for s in report["speedups"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"],
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers (CPU smoke run)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[64, 128])
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--kind", choices=["pair", "text"], default="pair")
    p.add_argument("--steps", type=int, default=None, help="steps per window (20 cuda, 3 cpu)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps (10 cuda, 1 cpu)")
    p.add_argument("--windows", type=int, default=None, help="timed windows (5 cuda, 3 cpu)")
    p.add_argument("--compile", action="store_true", help="torch.compile our encoder")
    p.add_argument("--compile-mode", default="default", choices=["default", "reduce-overhead", "max-autotune"],
                   help="torch.compile mode (reduce-overhead: CUDA graphs)")
    p.add_argument("--loops", nargs="+", default=list(LOOPS), choices=LOOPS,
                   help="time only these loops (ours alone: for packing runs)")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--json", type=Path, default=None, help="also write the report here")
    a = p.parse_args(argv)
    gpu = a.device == "cuda"
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one "Loading weights" bar per model otherwise
    hf_logging.set_verbosity_error()
    try:
        bc = BenchConfig(
            device=a.device, tiny=a.tiny, methods=tuple(a.methods), batch_sizes=tuple(a.batch_sizes),
            max_length=a.max_length, kind=a.kind, compile=a.compile, compile_mode=a.compile_mode, peak_tflops=a.peak_tflops, loops=tuple(a.loops),
            steps=a.steps or (20 if gpu else 3), warmup=a.warmup if a.warmup is not None else (10 if gpu else 1),
            windows=a.windows or (5 if gpu else 3))
    except ValueError as err:
        p.error(str(err))
    command = " ".join(["python", *map(shlex.quote, sys.argv)])
    env = environment(bc, command)
    for key in ("command", "git", "torch", "transformers", "cuda", "device", "torch_threads",
                "loadavg_1m", "peak"):
        print(f"# {key:13s} {env[key]}")
    report = run_benchmark(bc, command, log=lambda s: print(s, file=sys.stderr, flush=True))
    print(format_report(report))
    if a.json:
        tmp = a.json.with_name(a.json.name + ".tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n")
        os.replace(tmp, a.json)


if __name__ == "__main__":
    main()
