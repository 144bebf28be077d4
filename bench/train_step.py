"""Time training steps of trial arrays (M runs in one model) against an official-style loop.

For each array size M and batch size, in one process, it times
  (a) ours: ``trainables.arrays.trainer.ArrayTrainer.train_step`` itself on M members (bf16
      autocast on CUDA, one stacked encoder forward/backward for every member, each member's own
      data order, dropout stream, heads and AdamW; CLIP features already on the device, DALR's text
      teachers in bf16 and run once over every DALR member's rows; one host sync per step for the
      finite check; token ids copied host->device non-blocking, as ``TrainingData.batch`` does),
      plus ``ArrayTrainer.evaluate_dev`` every 125 steps (STS-B dev, every member in one pass);
  (b) official-style (docs/official-code.md §2.3), one run per method: fp32, unfused AdamW
      (foreach=False), fp32 teachers run on both dropout views, features copied host->device from
      NumPy each step, ``loss.item()`` each step, and SentEval's STS-B evaluation every 125 steps
      (train + dev + test, 8628 pairs, sorted by length, tokenised per batch of 128, fp32).
Arrays are mixed by default: member i trains method ``methods[i % len(methods)]`` (MCSE, KDMCSE,
DALR, MCSE, ...) with seed ``seed + i``. An array of 1 of every method in the mix is always timed:
it is the reference of the speed-up. ``--members max`` doubles M from the largest size listed
until CUDA runs out of memory and reports the last array that fit.

Per row: ms/step; tokens/s = 2 * bs * L * M / step (both dropout views of every member); MFU;
peak memory per member; "x1" = the time the array's members take one by one, each as an array
of 1 of its method, over the array's step time (for one method: tokens/s over an array of 1's
tokens/s); "x official" the same against official-style single runs. Evaluation is amortised into
"+eval": 1 / (step + eval / 125), eval = the median of 3 calls after a warm-up call.

Data are synthetic (no files needed): a random-init BERT (base: hidden 768, 12 layers, 12 heads,
vocab 30522; ``--tiny``: hidden 64, 2 layers, 4 heads, vocab 1024) saved to a temp folder with the test
tokenizer of ``trainables.testing``, random token ids (full ``max_length`` rows, no padding),
random 768-d (tiny: 64-d) CLIP features, random STS-B-sized sentence pairs. DALR's two teachers are
the same random BERT under the folder names ``simcse`` / ``DiffCSE`` (so ``cls_before_pooler``).

FLOPs of the students' forward+backward per step (heads and teachers not counted):
    F = M * (6 * N * T + 12 * n_layers * L * h * T),   T = 2 * bs * L tokens per member,
N = one encoder's non-embedding parameters (85.05M for BERT-base); the second term is QK^T and AV
(2 matmuls x 2 FLOPs x L x h per token, x3 for forward+backward).
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
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a fresh clone: python bench/...
from trainables.arrays import build as build_mod  # noqa: E402
from trainables.arrays import trainer as trainer_mod  # noqa: E402
from trainables.config.run_config import RunConfig  # noqa: E402
from trainables.data.batches import Batch  # noqa: E402
from trainables.evaluation.sts import cosine_rows, spearman100  # noqa: E402
from trainables.models.student import Student, StudentConfig  # noqa: E402
from trainables.models.teachers import TextTeacher  # noqa: E402
from trainables.objectives import TeacherInputs, compute_objective  # noqa: E402
from trainables.objectives.methods import get as get_method  # noqa: E402
from trainables.testing import WORDS, write_bert_tokenizer  # noqa: E402

METHODS = ("mcse", "kdmcse", "dalr")
LOOPS = ("ours", "official")
MAX = "max"
STSB_PAIRS = (5749, 1500, 1379)
"""STS-B train / dev / test pairs: SentEval's STSBenchmarkEval encodes all three at every eval."""
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0),
                    ("A100", 312.0))
"""Dense (no sparsity) bf16 peaks from NVIDIA's data sheets, matched in order in the device name."""
TEACHER_DIRS = ("simcse", "DiffCSE")
STORES = ("clip", "resnet")
"""BenchConfig.store: a CLIP store (image + caption features) or MCSE's ResNet one (image only)"""
POOL_ROWS = 2048
LR, ADAM_EPS, CLIP = 3e-5, 1e-6, 1.0  # official recipe (docs/official-code.md §2.3)
TARGET_M, TARGET_MFU, TARGET_X = 20, 0.35, 8.0
"""the issue's GPU targets: an array of 20 at >= 35% MFU and >= 8x one member's tokens/s"""


@dataclass(frozen=True)
class BenchConfig:
    device: str = "cpu"
    tiny: bool = False
    """hidden 64, 2 layers, 4 heads instead of BERT-base"""
    precision: str = "auto"
    """our arrays' ``RunConfig.precision``: 'auto' (bf16 autocast on CUDA, fp32 on CPU), 'bf16', 'fp32'"""
    methods: tuple[str, ...] = METHODS
    """the mix: member i trains methods[i % len(methods)] (one method: an unmixed array)"""
    members: tuple[int | str, ...] = (1, 5, 20)
    """array sizes M; 'max' doubles M from the largest listed until CUDA runs out of memory"""
    batch_sizes: tuple[int, ...] = (64,)
    max_length: int = 32
    kind: str = "pair"
    """'pair' (caption+image batches: each method's full objective) or 'text' (SimCSE-style)"""
    warmup: int = 5
    steps: int = 10
    """steps per timed window; the reported step time is the median over ``windows``"""
    windows: int = 3
    eval_every: int = 125
    eval_pairs: tuple[int, int, int] = STSB_PAIRS
    compile: bool = False
    """our arrays with RunConfig.compile (the official-style loop never compiles)"""
    compile_mode: str = "default"
    """'reduce-overhead': compile=graphs (CUDA graphs, fixed shapes); otherwise compile=default"""
    peak_tflops: float | None = None
    loops: tuple[str, ...] = LOOPS
    seed: int = 0
    max_members: int | None = None
    """cap of the 'max' doubling (needed on CPU, where no out-of-memory error stops it)"""
    packed: int = 1
    """how many copies of this command run side by side (recorded; see bench/README.md)"""
    evaluate: bool = True
    """time the evaluation too (the peer processes of gpu_suite.py skip it: they time steps)"""
    vocab_size: int | None = None
    """the random student's vocabulary (default: ``vocab``'s rule)"""
    store: str = "clip"
    """the caption store's features: 'clip' (image and CLIP caption features, the paper profile's
    store for KDMCSE and DALR) or 'resnet' (the image feature only, MCSE's own store)"""

    def __post_init__(self) -> None:
        bad = [m for m in self.methods if m not in METHODS] + [x for x in self.loops if x not in LOOPS]
        if bad or not self.methods or not self.loops:
            raise ValueError(f"unknown method/loop {bad}; methods from {METHODS}, loops from {LOOPS}")
        if self.precision not in ("auto", "bf16", "fp32"):
            raise ValueError(f"precision={self.precision!r}; use auto, bf16 or fp32")
        if self.store not in STORES:
            raise ValueError(f"store={self.store!r}; use one of {', '.join(STORES)}")
        if self.device not in ("cpu", "cuda") or self.kind not in ("pair", "text"):
            raise ValueError(f"device={self.device!r} kind={self.kind!r}; use cpu|cuda and pair|text")
        if min(self.batch_sizes, default=0) < 2 or max(self.batch_sizes) > POOL_ROWS:
            raise ValueError(f"batch sizes {self.batch_sizes} must lie in [2, {POOL_ROWS}]")
        sizes = [m for m in self.members if m != MAX]
        if not self.members or any(not isinstance(m, int) or isinstance(m, bool) or m < 1 for m in sizes) \
                or len(sizes) + 1 < len(self.members) or len(set(self.members)) != len(self.members):
            raise ValueError(f"members {self.members}: distinct array sizes >= 1, and 'max' at most once")
        if MAX in self.members and "ours" not in self.loops:
            raise ValueError("members 'max' grows our arrays; keep loop 'ours'")
        if MAX in self.members and self.device != "cuda" and self.max_members is None:
            raise ValueError("members 'max' stops at the first CUDA out-of-memory error; on CPU give "
                             "--max-members N (the largest M to try)")
        if self.max_members is not None and self.max_members < max([1, *sizes]):
            raise ValueError(f"max_members={self.max_members} is below the largest size listed")
        if min(self.steps, self.windows, self.eval_every, self.packed, *self.eval_pairs) < 1 \
                or self.warmup < 0:
            raise ValueError("steps, windows, eval_every, packed and eval_pairs must be >= 1, warmup >= 0")
        if not 2 <= self.max_length <= 512:
            raise ValueError(f"max_length={self.max_length} must lie in [2, 512]")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' but torch.cuda.is_available() is False; use --device cpu --tiny")

    def mix(self, m: int) -> list[str]:
        """The methods of an array of ``m`` members, in member order."""
        return [self.methods[i % len(self.methods)] for i in range(m)]

    @property
    def dims(self) -> tuple[int, int, int]:
        """(hidden, layers, heads) of the random student."""
        return (64, 2, 4) if self.tiny else (768, 12, 12)

    @property
    def vocab(self) -> int:
        """bert-base-uncased's 30522; 1024 for the tiny model, whose word embeddings would
        otherwise be 20x its layers (and dominate its step and its AdamW update); or
        ``vocab_size``."""
        return self.vocab_size or (1024 if self.tiny else 30522)


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


def make_workspace(root: Path, bc: BenchConfig, dims: tuple[int, int, int] | None = None) -> Workspace:
    """Random BERT folder (``dims`` = (hidden, layers, heads), default ``bc.dims``), two teacher
    links to it, and synthetic STS-B files."""
    from transformers import BertConfig, BertModel

    h, layers, heads = dims or bc.dims
    enc = write_bert_tokenizer(root / "encoder")
    torch.manual_seed(bc.seed)
    BertModel(BertConfig(vocab_size=bc.vocab, hidden_size=h, num_hidden_layers=layers,
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


def open_workspace(root: Path) -> Workspace:
    """A workspace ``make_workspace`` wrote (another process's): its folders and STS-B splits."""
    splits = {}
    for split in ("train", "dev", "test"):
        lines = (root / "senteval" / "STS" / "STSBenchmark" / f"sts-{split}.csv").read_text().splitlines()
        rows = [ln.split("\t") for ln in lines if ln]
        splits[split] = ([(r[5], r[6]) for r in rows], np.array([float(r[4]) for r in rows]))
    return Workspace(root, root / "encoder", tuple(str(root / n) for n in TEACHER_DIRS),
                     root / "senteval", splits)


class SyntheticData:
    """Stands in for ``TrainingData``: token ids on the host (as the tokenizer returns them) and
    CLIP features both on the device (ours) and as NumPy arrays (official-style). Only the batch
    kind being timed exists, so every schedule step of every member is of that kind."""

    pairs = None
    teacher_columns: tuple[str, ...] = ()

    def __init__(self, ws: Workspace, dim: int, max_length: int, device: torch.device, seed: int,
                 kind: str = "pair", vocab: int = 30522, clip_text: bool = True):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(5, vocab, (POOL_ROWS, max_length), generator=g)
        self.ids[:, 0], self.ids[:, -1] = 2, 3  # [CLS] ... [SEP] of the test vocabulary
        self.mask = torch.ones_like(self.ids)
        self.image_np = torch.randn(POOL_ROWS, dim, generator=g).numpy()
        self.clip_np = torch.randn(POOL_ROWS, dim, generator=g).numpy()
        self.image = torch.from_numpy(self.image_np).to(device)
        self.clip = torch.from_numpy(self.clip_np).to(device)
        self.senteval_dir = ws.senteval
        self.n_text, self.n_pair = (0, POOL_ROWS) if kind == "pair" else (POOL_ROWS, 0)
        self.image_dim = dim
        self.clip_text_dim = dim if clip_text else None
        """None: a store without CLIP caption features (MCSE's ResNet store)"""
        if not clip_text:
            self.clip = None

    def batch(self, kind: str, indices: np.ndarray, tokenize, device: torch.device,
              teacher_columns: tuple[str, ...] = ()) -> Batch:
        idx = torch.from_numpy(np.asarray(indices))
        ids = self.ids[idx].to(device, non_blocking=True)  # as TrainingData.batch
        mask = self.mask[idx].to(device, non_blocking=True)
        if kind == "text":
            return Batch(kind, ids, mask)
        d = idx.to(self.image.device, non_blocking=True)  # no stream sync the real loop lacks
        return Batch(kind, ids, mask, image=self.image[d],
                     clip_text=None if self.clip is None else self.clip[d])


# ------------------------------------------------------------------------------ the two loops
def method_settings(method: str, store: str = "clip"):
    """The method's default settings; on a store without caption features ('resnet'), KDMCSE's
    CLIP-text term off (it reads them), as a KDMCSE member on MCSE's store would be configured."""
    s = get_method(method).settings()
    if store != "clip" and getattr(s, "clip_text_term", False):
        s = replace(s, clip_text_term=False)
    return s


def build_ours(bc: BenchConfig, ws: Workspace, data: SyntheticData, method: str | Sequence[str],
               bs: int, members: int = 1, seeds: Sequence[int] | None = None):
    """The real ``ArrayTrainer`` (stacked model, heads, teachers, AdamW, DevEvaluator) on synthetic
    data: ``members`` members whose methods cycle through ``method`` (one name or a mix), member
    i with seed ``seeds[i]`` (default ``bc.seed + i``).

    Returns (trainer, step, evaluate, checkpoint); ``step(indices)`` ignores the indices: each
    member draws its batch from its own schedule, as in a real run."""
    mix = [method] if isinstance(method, str) else list(method)
    seeds = [bc.seed + i for i in range(members)] if seeds is None else list(seeds)
    if len(seeds) != members:
        raise ValueError(f"{len(seeds)} seeds for {members} members")
    cfgs = []
    for i in range(members):
        m = mix[i % len(mix)]
        cfgs.append((f"{m}/m{i}", RunConfig(
            objective=method_settings(m, bc.store), encoder=str(ws.encoder),
            text_teachers=ws.teachers if m == "dalr" else (), batch_size=bs,
            max_length=bc.max_length, epochs=10**6, max_steps=10**9, seed=seeds[i],
            precision=bc.precision, final_eval=False,
            # the trainer's own captured step (RunConfig.compile; trainables/arrays/capture.py)
            compile=("off" if not bc.compile else "graphs" if bc.compile_mode == "reduce-overhead"
                     else "default")).resolved()))
    with mock.patch.object(build_mod, "load_data", lambda _cfg: data):  # the synthetic data
        trainer = trainer_mod.ArrayTrainer(cfgs, device=bc.device)
    trainer.model.train()

    def checkpoint() -> None:  # what ArrayTrainer._eval_and_report writes at every evaluation
        path = ws.root / f"ckpt-{members}-{bs}"
        trainer.save_state(path)
        shutil.rmtree(path)

    return trainer, (lambda _idx=None: trainer.train_step()), trainer.evaluate_dev, checkpoint


class OfficialStep:
    """``train_mix.py``'s step as the official repos run it (docs/official-code.md §2.3, §6.1)."""

    def __init__(self, bc: BenchConfig, ws: Workspace, data: SyntheticData, method: str):
        self.device, self.kind, self.data = torch.device(bc.device), bc.kind, data
        self.obj = method_settings(method, bc.store).resolved()
        torch.manual_seed(bc.seed)
        self.student = Student(StudentConfig(
            encoder=str(ws.encoder), method=method, image_dim=data.image_dim,
            clip_text_dim=data.clip_text_dim if getattr(self.obj, "clip_text_term", False) else None,
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
            if self.data.clip is not None:  # MCSE's ResNet store has no caption features
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


def encoder_flops(non_embedding_params: int, hf_config: Any, bs: int, length: int) -> float:
    """One member's F = 6 N T + 12 n_layers L h T, T = 2 bs L (module docstring)."""
    tokens = 2 * bs * length
    return (6.0 * non_embedding_params * tokens
            + 12.0 * hf_config.num_hidden_layers * length * hf_config.hidden_size * tokens)


def array_flops(trainer: trainer_mod.ArrayTrainer, bs: int, length: int) -> float:
    """F summed over the array's members (each an encoder of the same size)."""
    enc = trainer.model.encoder
    n = sum(p[0].numel() for name, p in enc.named_parameters() if name.startswith("encoder__"))
    return enc.n_members * encoder_flops(n, enc.hf_config, bs, length)


def student_flops(student: Student, bs: int, length: int) -> float:
    """F of one Hugging Face student (the official-style loop)."""
    n = sum(p.numel() for p in student.encoder.encoder.parameters())
    return encoder_flops(n, student.encoder.config, bs, length)


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


def bench_one(bc: BenchConfig, ws: Workspace, data: SyntheticData, loop: str,
              methods: Sequence[str], bs: int, peak: float | None, once: dict[str, float],
              after: Callable[[Any, Callable], Any] | None = None) -> dict:
    """One row: an array of ``len(methods)`` members (ours) or one official-style run.
    ``after(trainer, step)``, if given, runs on the warm trainer once the row is timed (a
    profile of the same array: a captured one need not compile again); its result is the
    row's ``"after"``."""
    device = torch.device(bc.device)
    if bc.compile:
        torch.compiler.reset()  # a fresh model per row: drop the previous row's graphs
    _reset_peak(device)
    m = len(methods)
    if loop == "ours":
        trainer, step, evaluate, checkpoint = build_ours(bc, ws, data, methods, bs, members=m)
        flops = array_flops(trainer, bs, bc.max_length)
        eval_key = f"ours/{m}"
    else:
        if m != 1:
            raise ValueError("the official-style loop trains one run")
        runner = OfficialStep(bc, ws, data, methods[0])
        trainer, step, checkpoint = runner, runner, None
        evaluate = lambda: official_eval(runner.student, ws.splits)  # noqa: E731
        flops = student_flops(runner.student, bs, bc.max_length)
        eval_key = "official"
    windows = time_windows(step, bc, bs)
    mem = _peak_bytes(device)
    captured = getattr(getattr(trainer, "whole", None), "captured_steps", None)
    if not bc.evaluate:
        once.setdefault(eval_key, float("nan"))
    elif eval_key not in once:  # the same for every method and batch size at one M
        evaluate()  # warm-up (cuBLAS heuristics, compile)
        once[eval_key] = statistics.median(timed(evaluate, device) for _ in range(3))
    ckpt = None
    if checkpoint is not None and m == 1:  # arrays of 1 only: a checkpoint grows with M
        ckpt = once.setdefault(f"ckpt/{methods[0]}", timed(checkpoint, device))
    step_s, eval_s = statistics.median(windows), once[eval_key]
    tokens = 2 * bs * bc.max_length * m
    extra = after(trainer, step) if after is not None else None
    del trainer, step, evaluate, checkpoint
    return {
        "loop": loop, "members": m, "methods": dict(Counter(methods)), "batch_size": bs,
        "max_length": bc.max_length, "kind": bc.kind, "step_ms": step_s * 1e3,
        "window_ms": [w * 1e3 for w in windows], "steps_per_s": 1 / step_s,
        "steps_per_s_with_eval": 1 / (step_s + eval_s / bc.eval_every),
        "tokens_per_s": tokens / step_s, "flops_per_step": flops, "tflops": flops / step_s / 1e12,
        "mfu": flops / step_s / peak if peak else None, "peak_mem_bytes": mem,
        "peak_mem_per_member_bytes": mem / m, "eval_s": eval_s,
        "eval_sentences": 2 * (sum(bc.eval_pairs) if loop == "official" else bc.eval_pairs[1]),
        "checkpoint_s": ckpt, "x_vs_1": None, "x_vs_official": None, "max": False,
        "compile": ("off" if not bc.compile or loop != "ours" else
                    "graphs" if bc.compile_mode == "reduce-overhead" else "default"),
        "captured_steps": captured, "after": extra,
    }


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or (
        isinstance(e, RuntimeError) and ("out of memory" in str(e) or "CUBLAS_STATUS_ALLOC_FAILED" in str(e)))


def grow_to_max(measure: Callable[[int], dict], start: int, cap: int | None,
                log: Callable[[str], None] = lambda s: None) -> tuple[dict | None, dict]:
    """Double M from ``start`` until ``measure(M)`` runs out of memory (or M would pass ``cap``);
    -> (the row of the last M that fit or None, {fit, oom_at, stopped_by})."""
    last, m = None, start
    while cap is None or m <= cap:
        error = None
        try:
            row = measure(m)
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            if not _is_oom(e):
                raise
            error = str(e).splitlines()[0][:200]
        if error is not None:  # outside the except: the traceback no longer holds the array
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            log(f"ours     M {m:4d}: out of memory ({error})")
            return last, {"fit": last["members"] if last else None, "oom_at": m, "stopped_by": "out of memory"}
        last, m = row, 2 * m
    return last, {"fit": last["members"] if last else None, "oom_at": None, "stopped_by": f"cap {cap}"}


def add_speedups(rows: list[dict]) -> None:
    """x1 and x official of every array row: the time its members take one by one (each as an
    array of 1 of its method, or as an official-style run) over the array's step time."""
    for r in rows:
        if r["loop"] != "ours":
            continue
        for key, loop in (("x_vs_1", "ours"), ("x_vs_official", "official")):
            single = {next(iter(s["methods"])): s["step_ms"] for s in rows
                      if s["loop"] == loop and s["members"] == 1 and s["batch_size"] == r["batch_size"]}
            if all(m in single for m in r["methods"]):
                r[key] = sum(c * single[m] for m, c in r["methods"].items()) / r["step_ms"]


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
            "peak": peak_flops(bc)[1], "packed": bc.packed, "config": asdict(bc)}


def run_benchmark(bc: BenchConfig, command: str = "", workdir: Path | None = None,
                  log: Callable[[str], None] = lambda s: None, workspace: Path | None = None) -> dict:
    """Every (loop, array, batch size) row with its speed-ups, the 'max' search, the environment."""
    peak = peak_flops(bc)[0]
    sizes = sorted({1, *(m for m in bc.members if m != MAX)})
    report: dict[str, Any] = {"env": environment(bc, command), "results": [], "max": None}
    rows = report["results"]
    with tempfile.TemporaryDirectory(prefix="bench-train-step-", dir=workdir) as tmp:
        ws = open_workspace(workspace) if workspace else make_workspace(Path(tmp), bc)
        data = SyntheticData(ws, bc.dims[0], bc.max_length, torch.device(bc.device),
                             bc.seed, bc.kind, bc.vocab, clip_text=bc.store == "clip")
        once: dict[str, float] = {}

        def row(loop: str, methods: list[str], bs: int) -> dict:
            r = bench_one(bc, ws, data, loop, methods, bs, peak, once)
            log(f"{loop:8s} M {len(methods):4d} {label(r):28s} bs {bs:3d}: {r['step_ms']:8.1f} ms/step")
            return r

        for bs in bc.batch_sizes:
            if "official" in bc.loops:
                rows += [row("official", [m], bs) for m in bc.methods]
            if "ours" in bc.loops:
                rows += [row("ours", [m], bs) for m in bc.methods]  # the reference arrays of 1
                rows += [row("ours", bc.mix(m), bs) for m in sizes if m > 1]
                if MAX in bc.members:
                    start = 2 * max(sizes)
                    best, info = grow_to_max(lambda m, bs=bs: row("ours", bc.mix(m), bs), start,
                                             bc.max_members, log)
                    if best is not None:
                        best["max"] = True
                        rows.append(best)
                    else:  # the largest listed size is the largest that fit
                        info["fit"] = max(sizes)
                    report["max"] = {**info, "batch_size": bs}
    add_speedups(rows)
    return report


def label(r: dict) -> str:
    """'mcse' for one method, 'mcse 2, kdmcse 2, dalr 1' for a mix."""
    ms = r["methods"]
    return next(iter(ms)) if len(ms) == 1 else ", ".join(f"{m} {c}" for m, c in ms.items())


def format_report(report: dict) -> str:
    head = (f"{'loop':8s} {'M':>4s} {'methods':28s} {'bs':>4s} {'ms/step':>8s} {'tokens/s':>9s} "
            f"{'TFLOP/s':>8s} {'MFU':>6s} {'MiB/member':>10s} {'x1':>6s} {'x offic':>7s} {'+eval':>7s} "
            f"{'eval s':>7s}")
    lines = [head, "-" * len(head)]

    def x(v: float | None) -> str:
        return f"{v:5.2f}x" if v is not None else f"{'-':>6s}"

    for r in report["results"]:
        mfu = f"{100 * r['mfu']:5.1f}%" if r["mfu"] is not None else f"{'-':>6s}"
        m = f"{r['members']}{'*' if r['max'] else ''}"
        lines.append(
            f"{r['loop']:8s} {m:>4s} {label(r):28s} {r['batch_size']:4d} {r['step_ms']:8.1f} "
            f"{r['tokens_per_s']:9.0f} {r['tflops']:8.3f} {mfu} "
            f"{r['peak_mem_per_member_bytes'] / 2**20:10.0f} {x(r['x_vs_1'])} {x(r['x_vs_official']):>7s} "
            f"{r['steps_per_s_with_eval']:7.2f} {r['eval_s']:7.2f}")
    ckpt = {next(iter(r["methods"])): r["checkpoint_s"] for r in report["results"] if r["checkpoint_s"]}
    if ckpt:
        lines.append("ours: ArrayTrainer.save_state of an array of 1 at every eval (not in +eval): "
                     + ", ".join(f"{m} {s:.2f} s" for m, s in ckpt.items()))
    mx = report.get("max")
    if mx:
        lines.append(f"max: M={mx['fit']} fit (row marked *), stopped by {mx['stopped_by']}"
                     + (f" at M={mx['oom_at']}" if mx["oom_at"] else ""))
    target = [r for r in report["results"] if r["loop"] == "ours" and r["members"] == TARGET_M]
    for r in target:
        if r["mfu"] is not None and r["x_vs_1"] is not None:
            ok = r["mfu"] >= TARGET_MFU and r["x_vs_1"] >= TARGET_X
            lines.append(f"targets (array of {TARGET_M}, bs {r['batch_size']}): MFU {100 * r['mfu']:.1f}% "
                         f"(>= {100 * TARGET_MFU:.0f}%), {r['x_vs_1']:.2f}x one member's tokens/s "
                         f"(>= {TARGET_X:g}x): {'met' if ok else 'NOT met'}")
    packed = report["env"].get("packed", 1)
    if packed > 1:
        lines.append(f"this process is one of {packed} packed side by side: sum their reports with "
                     "python bench/train_step.py --sum-packed FILE.json ...")
    return "\n".join(lines)


def sum_packed(reports: Sequence[dict]) -> dict:
    """N reports of processes run side by side -> their summed throughput per (loop, M, methods, bs)."""
    out: dict[tuple, dict] = {}
    for rep in reports:
        for r in rep["results"]:
            k = (r["loop"], r["members"], json.dumps(r["methods"], sort_keys=True), r["batch_size"])
            s = out.setdefault(k, {"loop": r["loop"], "members": r["members"], "methods": r["methods"],
                                   "batch_size": r["batch_size"], "processes": 0, "tokens_per_s": 0.0,
                                   "tflops": 0.0, "mfu": 0.0, "step_ms": []})
            s["processes"] += 1
            s["tokens_per_s"] += r["tokens_per_s"]
            s["tflops"] += r["tflops"]
            s["mfu"] = None if r["mfu"] is None or s["mfu"] is None else s["mfu"] + r["mfu"]
            s["step_ms"].append(r["step_ms"])
    return {"packed": len(reports), "results": list(out.values())}


def format_packed(summary: dict) -> str:
    lines = [f"{summary['packed']} reports summed (processes run side by side)"]
    for s in summary["results"]:
        mfu = f"{100 * s['mfu']:.1f}%" if s["mfu"] is not None else "-"
        lines.append(f"{s['loop']:8s} M {s['members']:3d} {label(s):28s} bs {s['batch_size']:3d}: "
                     f"{s['processes']} x ms/step {[round(x, 1) for x in s['step_ms']]}, "
                     f"{s['tokens_per_s']:.0f} tokens/s together, {s['tflops']:.3f} TFLOP/s, MFU {mfu}")
    return "\n".join(lines)


def _size(text: str) -> int | str:
    if text == MAX:
        return MAX
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: an array size (integer) or 'max'") from None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"],
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers (CPU smoke run)")
    p.add_argument("--members", nargs="+", type=_size, default=None,
                   help="array sizes, and 'max' (default: 1 5 20 max on cuda, 1 5 on cpu)")
    p.add_argument("--mixed", action=argparse.BooleanOptionalAction, default=True,
                   help="members cycle through --methods (default); --no-mixed: all the first one")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[64])
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--kind", choices=["pair", "text"], default="pair")
    p.add_argument("--store", choices=STORES, default="clip",
                   help="caption features: clip (image + CLIP text) or resnet (image only, MCSE's store)")
    p.add_argument("--steps", type=int, default=None, help="steps per window (20 cuda, 3 cpu)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps (10 cuda, 1 cpu)")
    p.add_argument("--windows", type=int, default=None, help="timed windows (5 cuda, 3 cpu)")
    p.add_argument("--compile", action="store_true", help="torch.compile our stacked encoder")
    p.add_argument("--compile-mode", default="default", choices=["default", "reduce-overhead"],
                   help="torch.compile mode (reduce-overhead: CUDA graphs)")
    p.add_argument("--loops", nargs="+", default=list(LOOPS), choices=LOOPS,
                   help="time only these loops (ours alone: for packing runs)")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--max-members", type=int, default=None,
                   help="largest M the 'max' doubling tries (required on CPU)")
    p.add_argument("--packed", type=int, default=1, metavar="N",
                   help="this is one of N copies run side by side (recorded; see bench/README.md)")
    p.add_argument("--sum-packed", nargs="+", type=Path, default=None, metavar="JSON",
                   help="only sum the --json reports of processes run side by side, and exit")
    p.add_argument("--json", type=Path, default=None, help="also write the report here")
    p.add_argument("--workspace", type=Path, default=None,
                   help="a workspace another run wrote (its random BERT, teachers and STS-B files)")
    p.add_argument("--no-eval", action="store_true", help="time the steps only, not the evaluation")
    a = p.parse_args(argv)
    if a.sum_packed:
        print(format_packed(sum_packed([json.loads(f.read_text()) for f in a.sum_packed])))
        return
    gpu = a.device == "cuda"
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one "Loading weights" bar per model otherwise
    hf_logging.set_verbosity_error()
    try:
        bc = BenchConfig(
            device=a.device, tiny=a.tiny, methods=tuple(a.methods if a.mixed else a.methods[:1]),
            members=tuple(a.members or ((1, 5, 20, MAX) if gpu else (1, 5))),
            batch_sizes=tuple(a.batch_sizes), max_length=a.max_length, kind=a.kind, store=a.store,
            compile=a.compile, compile_mode=a.compile_mode, peak_tflops=a.peak_tflops,
            loops=tuple(a.loops), max_members=a.max_members, packed=a.packed, evaluate=not a.no_eval,
            steps=a.steps or (20 if gpu else 3), warmup=a.warmup if a.warmup is not None else (10 if gpu else 1),
            windows=a.windows or (5 if gpu else 3))
    except ValueError as err:
        p.error(str(err))
    command = " ".join(["python", *map(shlex.quote, sys.argv)]) if argv is None else \
        " ".join(["python", "bench/train_step.py", *map(shlex.quote, argv)])
    env = environment(bc, command)
    for key in ("command", "git", "torch", "transformers", "cuda", "device", "torch_threads",
                "loadavg_1m", "peak", "packed"):
        print(f"# {key:13s} {env[key]}")
    report = run_benchmark(bc, command, log=lambda s: print(s, file=sys.stderr, flush=True),
                           workspace=a.workspace)
    print(format_report(report))
    if a.json:
        tmp = a.json.with_name(a.json.name + ".tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n")
        os.replace(tmp, a.json)


if __name__ == "__main__":
    main()
