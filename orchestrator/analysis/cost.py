"""What a campaign will cost on GPUs: FLOPs, GPU-hours, wall time and on-demand price, estimated.

Pure functions of numbers (an encoder's shape; a run's method, batch, length, steps and
evaluation cadence), so a dry run can price a plan before anything starts. The rate comes from
one of two bases, the better one available, and every estimate names it:

- **measured**: a ``bench/gpu_suite.py --json`` report measured on that GPU type (``--rates FILE``,
  or ``bench/rates/*.json``) in the precision the array trains in (``RunConfig.precision``; the
  report's ``precision``): its arrays' member-steps per second with the dev evaluation
  amortised, scaled by FLOPs from the report's shapes (BERT-base, batch 64, 32 tokens) to each
  run's own, at the array's own size or interpolated between two measured sizes;
- **FLOPs**: each member-step's FLOPs (``train_flops``) at an assumed MFU (``--mfu``, default
  ``DEFAULT_MFU``) of the GPU's dense peak for that precision (``GPUS``): TF32 for fp32 runs
  (their matmuls use TF32 on these GPUs), bf16 for bf16 runs.

A bf16 rate never prices an fp32 run, nor the reverse: bf16 arrays run about twice as fast, so a
borrowed rate would halve the bill of the precision the plan really trains in. Where an fp32
array's FLOPs price comes out below its time at a bf16 rate measured for its size (fp32 is not
faster), a warning gives that bound.

FLOPs of one member-step (both dropout views, T = 2 x batch x length tokens): the student's
forward and backward, 6 N T + 12 n_layers L h T (N: its non-embedding parameters; the second
term is attention's QK^T and AV); for DALR, each frozen text teacher's forward over the batch,
2 N_t t + 4 n_layers L h t (t = batch x length), counted at every step (an upper bound: the
teachers run on caption steps). Evaluations encode each distinct sentence once per member,
forward only: STS-B dev every ``eval_every`` steps and at the last, and the seven STS test sets
once (``SENTEVAL_SENTENCES``).

Assumptions, printed with every estimate: packed arrays (``--gpus-per-trial`` below 1) and
multi-GPU arrays (above 1) keep one GPU's rate per GPU (neither packing's gain nor DDP's
communication is modelled); the arrays run all at once unless ``--max-concurrent`` caps them,
longest first; a GPU node is billed for the whole wall time of the campaign, and so is the head.
Prices: on-demand, us-east-1, approximate, as ``cluster.yaml`` and the README's "What it costs";
check current pricing.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_MFU = 0.25
"""assumed share of the dense peak (TF32 for fp32 runs, bf16 for bf16 runs) an array reaches where
nothing is measured (the arrays' target at 20 members is 35%; bench/gpu_suite.py measures it)"""
PRECISIONS = ("fp32", "bf16")
"""what an array trains in on a GPU: RunConfig.precision, with 'auto' read as bf16 (its CUDA meaning)"""
DEFAULT_GPU = "A10G"
"""the cluster file's GPU (g5 instances)"""


@dataclass(frozen=True)
class Gpu:
    name: str
    peak_tflops: float
    """dense (no sparsity) bf16 tensor-core peak"""
    memory_gib: float
    source: str
    tf32_tflops: float
    """dense (no sparsity) TF32 tensor-core peak: what an fp32 run's matmuls reach"""
    tf32_source: str

    def peak(self, precision: str) -> tuple[float, str, str]:
        """(TFLOP/s, its name, its source) of the dense peak an array in ``precision`` runs at."""
        if precision == "fp32":
            return self.tf32_tflops, "TF32", self.tf32_source
        return self.peak_tflops, "bf16", self.source


GPUS: dict[str, Gpu] = {g.name: g for g in (
    Gpu("A10G", 70.0, 24.0, "NVIDIA publishes no A10G sheet; its A10 sheet gives 125, third-party "
        "comparisons give the A10G 70", 35.0,
        "half the bf16 figure, as on the A10 sheet (TF32 62.5, bf16 125, dense)"),
    Gpu("A100-40GB", 312.0, 40.0, "NVIDIA A100 data sheet", 156.0, "NVIDIA A100 data sheet"),
    Gpu("A100-80GB", 312.0, 80.0, "NVIDIA A100 data sheet", 156.0, "NVIDIA A100 data sheet"),
    Gpu("H100", 989.0, 80.0, "NVIDIA H100 SXM data sheet", 494.5,
        "NVIDIA H100 SXM data sheet, 989 with sparsity"),
    Gpu("H200", 989.0, 141.0, "NVIDIA H200 data sheet", 494.5,
        "NVIDIA H200 data sheet, 989 with sparsity"),
)}


@dataclass(frozen=True)
class Instance:
    """A cloud machine type of the cluster files, with its on-demand price."""

    name: str
    gpu: str | None
    gpus: int
    usd_per_hour: float
    role: str


INSTANCES: tuple[Instance, ...] = (
    Instance("g4dn.xlarge", None, 0, 0.53, "head"),  # its T4 takes no array (cluster.yaml)
    Instance("g5.xlarge", "A10G", 1, 1.01, "gpu_small"),
    Instance("g5.12xlarge", "A10G", 4, 5.67, "gpu_large"),
    Instance("p4d.24xlarge", "A100-40GB", 8, 32.77, "the larger gpu_large cluster.yaml names"),
)
"""on-demand, us-east-1, approximate: cluster.yaml's comments and the README's 'What it costs'"""
HEAD = INSTANCES[0]

SENTEVAL_SENTENCES = {"dev": 2_909, "test": 27_274}
"""distinct sentences of SentEval's STS data: STS-B dev, and the seven test sets together"""
EVAL_TOKENS = 16
"""tokens of an evaluation sentence with [CLS] and [SEP] (the sentences average 11.5 words)"""
USABLE_MEMORY = 0.9
"""share of a GPU's memory an array may plan to fill (CUDA context, allocator slack)"""


@dataclass(frozen=True)
class Encoder:
    """What the FLOP and memory counts need of an encoder's config."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    positions: int = 512

    @classmethod
    def from_config(cls, cfg: Any) -> Encoder:
        """From a Hugging Face BERT/RoBERTa config (or anything with its attribute names); a
        CLIP config (DALR's CLIP text teacher) by its text tower's, kept under ``text_config``."""
        cfg = getattr(cfg, "text_config", None) or cfg
        return cls(cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                   cfg.intermediate_size, cfg.vocab_size, getattr(cfg, "max_position_embeddings", 512))

    @property
    def non_embedding_params(self) -> int:
        """Per layer: Q, K, V, O (4 h^2 + 4 h), the FFN (2 h i + i + h), two LayerNorms (4 h)."""
        h, i = self.hidden, self.intermediate
        return self.layers * (4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h)

    @property
    def params(self) -> int:
        """With the word, position and token-type embeddings and their LayerNorm."""
        return self.non_embedding_params + (self.vocab + self.positions + 2) * self.hidden + 2 * self.hidden


@dataclass(frozen=True)
class Member:
    """One run as the estimate sees it."""

    method: str
    batch_size: int
    max_length: int
    steps: int
    eval_every: int
    encoder: Encoder
    teachers: tuple[Encoder, ...] = ()
    """DALR's frozen text teachers"""
    final_eval: bool = True
    precision: str = "fp32"
    """RunConfig.precision: 'fp32' (its default, TF32 matmuls), 'bf16' or 'auto' (bf16 on a GPU)"""

    @property
    def trains_in(self) -> str:
        """'fp32' or 'bf16': what this run's arithmetic is on a GPU."""
        p = "bf16" if self.precision == "auto" else self.precision
        if p not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r}; use fp32, bf16 or auto")
        return p


def forward_flops(enc: Encoder, rows: float, length: int) -> float:
    """Forward FLOPs of ``rows`` sequences of ``length`` tokens: 2 N a token, plus attention."""
    tokens = rows * length
    return 2.0 * enc.non_embedding_params * tokens + 4.0 * enc.layers * length * enc.hidden * tokens


def train_flops(m: Member) -> float:
    """One optimiser step of one member (module docstring)."""
    e, tokens = m.encoder, 2 * m.batch_size * m.max_length
    f = 6.0 * e.non_embedding_params * tokens + 12.0 * e.layers * m.max_length * e.hidden * tokens
    return f + sum(forward_flops(t, m.batch_size, m.max_length) for t in m.teachers)


def dev_evaluations(m: Member) -> int:
    """Every ``eval_every`` steps and at the last step."""
    return math.ceil(m.steps / m.eval_every)


def eval_flops(m: Member) -> float:
    """All evaluations of one run: its dev evaluations and the final seven-task test."""
    f = dev_evaluations(m) * forward_flops(m.encoder, SENTEVAL_SENTENCES["dev"], EVAL_TOKENS)
    return f + (forward_flops(m.encoder, SENTEVAL_SENTENCES["test"], EVAL_TOKENS) if m.final_eval else 0.0)


def member_memory_bytes(m: Member) -> float:
    """GPU memory of one member: fp32 weights, gradients and two AdamW moments (16 bytes a
    parameter), the activations kept for the backward, the dropout masks (a byte an element)
    and, for DALR, its teachers' weights (bf16 under bf16 autocast, fp32 in fp32). Activations
    per layer (Korthikanti et al. 2022): 16 values per hidden unit and token and 2 per attention
    score, plus 2 and 1 bytes of dropout mask: 34 and 5 bytes under bf16 autocast (2-byte
    values), 66 and 9 in fp32 (4-byte values)."""
    e, tokens = m.encoder, 2 * m.batch_size * m.max_length
    b = 4 if m.trains_in == "fp32" else 2
    act = e.layers * ((16 * b + 2) * tokens * e.hidden + (2 * b + 1) * e.heads * m.max_length * tokens)
    masks = (1 + 2 * e.layers) * tokens * e.hidden + e.layers * e.heads * m.max_length * tokens
    return 16.0 * e.params + act + masks + sum(float(b) * t.params for t in m.teachers)


# ------------------------------------------------------------------------------ measured rates
@dataclass(frozen=True)
class Measured:
    """A gpu_suite report's arrays on one GPU type."""

    source: str
    device: str
    rates: Mapping[int, float]
    """array size -> member-steps per second, the dev evaluation amortised (arrays of 1: the
    mean step time of the report's arrays of 1, one a method)"""
    flops_per_member_step: float
    """the report's FLOPs per member-step (students only, as bench/train_step.py counts them)"""
    date: str = ""
    mfus: Mapping[int, float] = dataclasses.field(default_factory=dict)
    """array size -> the MFU the report measured for it (where it states one)"""
    precision: str | None = None
    """'bf16' or 'fp32': what its arrays trained in (None: the report does not say; then it
    prices nothing)"""

    def rate(self, members: int) -> float | None:
        """Member-steps/s of an array of ``members``: the measured one, or between two measured
        sizes the step time interpolated linearly in M (an array's step is a fixed part plus a
        part per member); None outside the measured sizes: never a rate borrowed from another
        size (an array of 1 is about half as fast per member as one of 5)."""
        if members in self.rates:
            return self.rates[members]
        below = [m for m in self.rates if m < members]
        above = [m for m in self.rates if m > members]
        if not below or not above:
            return None
        a, b = max(below), min(above)
        ta, tb = a / self.rates[a], b / self.rates[b]  # seconds per array step
        return members / (ta + (members - a) * (tb - ta) / (b - a))

    def span(self) -> str:
        sizes = sorted(self.rates)
        return f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]}"


def gpu_of(device_name: str) -> str | None:
    """'NVIDIA H100 80GB HBM3' -> 'H100'; None when it is none of ``GPUS``."""
    name = device_name.upper().replace(" ", "")
    for key in ("H200", "H100", "A10G"):
        if key in name:
            return key
    if "A100" in name:
        return "A100-80GB" if "80GB" in name else "A100-40GB"
    return None


def report_precision(report: Mapping[str, Any]) -> str | None:
    """What a report's arrays trained in: gpu_suite's ``precision`` (resolved), else its
    ``env.config`` (``precision``, with 'auto' meaning bf16 on CUDA, as bench/train_step.py reads
    it); None when it says neither."""
    if report.get("precision") in PRECISIONS:
        return report["precision"]
    cfg = (report.get("env") or {}).get("config") or {}
    p = cfg.get("precision")
    if p in PRECISIONS:
        return p
    if p == "auto" and cfg.get("device"):
        return "bf16" if str(cfg["device"]).startswith("cuda") else "fp32"
    return None


def read_measured(path: str | Path) -> Measured:
    """The arrays of a ``bench/gpu_suite.py --json`` report; one clear error when it is not one."""
    try:
        r = json.loads(Path(path).read_text())
        # the eager arrays (a run's default, compile=off): a captured row prices no plan
        ours = [x for x in r["rows"] if x["loop"] == "ours" and x.get("compile", "off") == "off"]
        rows = [x for x in ours if x["members"] > 1]
        ones = [x for x in ours if x["members"] == 1]
        device = r["env"]["device"]
        precision = report_precision(r)
        rates = {int(x["members"]): x["members"] * x["steps_per_s_with_eval"] for x in rows}
        mfus = {int(x["members"]): float(x["mfu"]) for x in rows if x.get("mfu")}
        per = sum(x["flops_per_step"] / x["members"] for x in rows) / max(1, len(rows))
        if ones:  # one array of 1 a method: a mixed plan's array of 1 at their mean step time
            rates[1] = len(ones) / sum(1.0 / x["steps_per_s_with_eval"] for x in ones)
            if all(x.get("mfu") for x in ones):
                mfus[1] = sum(float(x["mfu"]) for x in ones) / len(ones)
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
        raise ValueError(f"--rates {path}: not a report of bench/gpu_suite.py --json "
                         f"({e.__class__.__name__}: {e}); pass the file that command wrote") from None
    if not rows:
        raise ValueError(f"--rates {path}: the report has no array of 2 or more members")
    return Measured(str(path), device, rates, per, str(r.get("date", "")), mfus, precision)


def last_array_mfu(reports: Iterable[Measured]) -> str | None:
    """'8.7% (an array of 20 on NVIDIA H200 in bf16, bench/rates/h200.json, 2026-11-26)': the MFU
    of the largest array of the newest report that states one (against the report's own peak);
    None without such a report."""
    withmfu = [m for m in reports if m.mfus]
    if not withmfu:
        return None
    m = max(withmfu, key=lambda r: r.date)
    size = max(m.mfus)
    return (f"{m.mfus[size]:.1%} (an array of {size} on {m.device} in {m.precision or 'an unrecorded precision'}, "
            f"{m.source}, {m.date})")


def measured_for(gpu: str, reports: Iterable[Measured], precision: str | None = None) -> Measured | None:
    """The first report measured on ``gpu`` (in ``precision``, when one is given)."""
    return next((m for m in reports if gpu_of(m.device) == gpu
                 and (precision is None or m.precision == precision)), None)


def array_precision(members: Sequence[Member]) -> str:
    """The one precision an array's members train in (they share it: trainables/arrays/members.py)."""
    ps = {m.trains_in for m in members}
    if len(ps) != 1:
        raise ValueError(f"an array mixes precisions {sorted(ps)}: its members share one")
    return ps.pop()


# ------------------------------------------------------------------------------ the estimate
@dataclass(frozen=True)
class ArrayCost:
    members: int
    member_steps: int
    train_flops: float
    eval_flops: float
    dev_evaluations: int
    gpu_seconds: float
    """the array's time on one whole GPU"""
    memory_bytes: float


@dataclass(frozen=True)
class PriceRow:
    instance: Instance
    gpu_hours: float
    wall_hours: float
    nodes: int
    usd: float
    basis: str
    fit: int | None = None
    """members that fit one array on this GPU, when the plan's largest array does not (else None)"""


@dataclass(frozen=True)
class Estimate:
    gpu: Gpu
    gpus_per_trial: float
    concurrent: int
    mfu: float
    basis: str
    measured: bool
    arrays: tuple[ArrayCost, ...]
    wall_seconds: float
    prices: tuple[PriceRow, ...]
    warnings: tuple[str, ...] = ()

    @property
    def gpu_hours(self) -> float:
        return sum(a.gpu_seconds for a in self.arrays) / 3600.0

    @property
    def runs(self) -> int:
        return sum(a.members for a in self.arrays)


def array_seconds(members: Sequence[Member], gpu: Gpu, mfu: float, measured: Measured | None) -> float:
    """One array's time on one whole GPU: its member-steps at the measured rate (scaled by FLOPs)
    and its test evaluations at the same FLOP rate, or everything at ``mfu`` of the peak of the
    array's precision. A report in another precision measures nothing here."""
    precision = array_precision(members)
    if measured is not None and measured.precision != precision:
        measured = None
    seconds = measured_seconds(members, measured) if measured is not None else None
    if seconds is not None:
        return seconds
    speed = gpu.peak(precision)[0] * 1e12 * mfu
    return sum(m.steps * train_flops(m) + eval_flops(m) for m in members) / speed


def measured_seconds(members: Sequence[Member], measured: Measured) -> float | None:
    """An array's time at ``measured``'s rate for its size (whatever the precisions), None when
    the report has no rate for that size."""
    rate = measured.rate(len(members))
    if rate is None:
        return None
    flops_per_s = rate * measured.flops_per_member_step  # member-steps/s at the measured shapes
    return sum(m.steps * train_flops(m) / flops_per_s
               + (forward_flops(m.encoder, SENTEVAL_SENTENCES["test"], EVAL_TOKENS) / flops_per_s
                  if m.final_eval else 0.0) for m in members)


def fits(costs: Sequence[ArrayCost], gpu: Gpu, gpus_per_trial: float) -> int | None:
    """None when every array fits its share of ``gpu`` (estimated memory), else the array size
    that would (a multi-GPU array holds every member's weights on each GPU: counted whole)."""
    per_gpu = gpu.memory_gib * 2**30 * USABLE_MEMORY * min(1.0, gpus_per_trial)
    if max(a.memory_bytes for a in costs) <= per_gpu:
        return None
    return max(1, int(per_gpu // max(a.memory_bytes / a.members for a in costs)))


def makespan(durations: Sequence[float], lanes: int) -> float:
    """Wall time of jobs on ``lanes`` parallel lanes, each next-longest onto the freest lane."""
    free = [0.0] * max(1, lanes)
    for d in sorted(durations, reverse=True):
        i = min(range(len(free)), key=free.__getitem__)
        free[i] += d
    return max(free) if durations else 0.0


def estimate(arrays: Sequence[Sequence[Member]], gpu: str = DEFAULT_GPU, gpus_per_trial: float = 1.0,
             concurrent: int | None = None, mfu: float = DEFAULT_MFU,
             measured: Sequence[Measured] = ()) -> Estimate:
    """GPU-hours, wall time and price of ``arrays`` (each a list of its members) on ``gpu``, with
    ``gpus_per_trial`` GPUs per array and ``concurrent`` arrays at once (None: all of them)."""
    if gpu not in GPUS:
        raise ValueError(f"--gpu-type {gpu!r} is unknown; use one of {', '.join(GPUS)}")
    if not gpus_per_trial > 0:
        raise ValueError(f"--gpus-per-trial {gpus_per_trial:g}: a GPU estimate needs GPUs per array > 0")
    if not 0 < mfu <= 1:
        raise ValueError(f"--mfu {mfu:g} must lie in (0, 1]")
    if not arrays or not all(arrays):
        raise ValueError("nothing to estimate: no array, or an empty one")
    g = GPUS[gpu]
    lanes = min(concurrent or len(arrays), len(arrays))
    precisions = [array_precision(ms) for ms in arrays]
    costs = tuple(ArrayCost(
        len(ms), sum(m.steps for m in ms), sum(m.steps * train_flops(m) for m in ms),
        sum(eval_flops(m) for m in ms), sum(dev_evaluations(m) for m in ms),
        array_seconds(ms, g, mfu, measured_for(gpu, measured, p)), sum(member_memory_bytes(m) for m in ms))
        for ms, p in zip(arrays, precisions, strict=True))
    # a fraction g of a GPU runs an array 1/g times slower, g GPUs (DDP) g times faster
    wall = makespan([a.gpu_seconds / gpus_per_trial for a in costs], lanes)
    warnings = []
    worst = max(costs, key=lambda a: a.memory_bytes)
    fit = fits(costs, g, gpus_per_trial)
    if fit is not None:
        per_gpu = g.memory_gib * 2**30 * USABLE_MEMORY * min(1.0, gpus_per_trial)
        where = f"{gpus_per_trial:g} of an {gpu}" if gpus_per_trial < 1 else f"one {gpu}"
        warnings.append(f"an array of {worst.members} needs about {worst.memory_bytes / 2**30:.0f} GiB "
                        f"(estimate), more than the {per_gpu / 2**30:.0f} GiB of {where}: "
                        f"use --array-size {fit}")
    # fp32 is not faster than bf16: an fp32 array priced on FLOPs below the time the same array
    # took at a bf16 rate measured for its size is too cheap, and the estimate says so
    bf16 = measured_for(gpu, measured, "bf16")
    if bf16 is not None:
        pairs = [(c.gpu_seconds, measured_seconds(ms, bf16)) for c, ms, p
                 in zip(costs, arrays, precisions, strict=True) if p == "fp32"]
        pairs = [(s, b) for s, b in pairs if b is not None]
        if pairs and sum(s for s, _ in pairs) < sum(b for _, b in pairs):
            flops_h, bound_h = sum(s for s, _ in pairs) / 3600, sum(b for _, b in pairs) / 3600
            warnings.append(f"the fp32 arrays' {flops_h:,.1f} GPU-hours at the assumed {mfu:.0%} MFU are "
                            f"fewer than the {bound_h:,.1f} they would take at the bf16 rate measured "
                            f"for their size ({bf16.source}); fp32 is not faster than bf16: expect "
                            f"more than {bound_h:,.1f} (a lower --mfu prices that)")
    groups = sorted(set(precisions), key=PRECISIONS.index)
    bases = [precision_basis(gpu, mfu, measured, p,
                             sorted({len(ms) for ms, q in zip(arrays, precisions, strict=True) if q == p}))
             for p in groups]
    basis = bases[0][0] if len(groups) == 1 else "; ".join(
        f"the {p} arrays: {b}" for p, (b, _) in zip(groups, bases, strict=True))
    rows = []
    for inst in INSTANCES:
        if inst.gpu is None:
            continue
        ig = GPUS[inst.gpu]
        ims = [measured_for(inst.gpu, measured, p) for p in precisions]
        secs = [array_seconds(ms, ig, mfu, im) for ms, im in zip(arrays, ims, strict=True)]
        w = makespan([s / gpus_per_trial for s in secs], lanes)
        nodes = max(1, math.ceil(lanes * gpus_per_trial / inst.gpus - 1e-9))
        usd = w / 3600.0 * (nodes * inst.usd_per_hour + HEAD.usd_per_hour)
        covered = all(im is not None and im.rate(len(ms)) is not None for ms, im in zip(arrays, ims, strict=True))
        peaks = "/".join(ig.peak(p)[1] for p in groups)
        rows.append(PriceRow(inst, sum(secs) / 3600.0, w / 3600.0, nodes, usd,
                             "measured" if covered else f"FLOPs at {mfu:.0%} MFU of the {peaks} peak",
                             fits(costs, ig, gpus_per_trial)))
    return Estimate(g, gpus_per_trial, lanes, mfu, basis, all(ok for _, ok in bases), costs,
                    wall, tuple(rows), tuple(warnings))


def precision_basis(gpu: str, mfu: float, measured: Sequence[Measured], precision: str,
                    sizes: Sequence[int]) -> tuple[str, bool]:
    """The basis line of the arrays of ``sizes`` members training in ``precision`` on ``gpu``, and
    whether a measurement in that precision covers every one of them."""
    g = GPUS[gpu]
    peak, peak_name, source = g.peak(precision)
    mine = measured_for(gpu, measured, precision)
    known = [n for n in sizes if mine is not None and mine.rate(n) is not None]
    unknown = [n for n in sizes if n not in known]
    assumed = (f"FLOPs at {mfu:.0%} MFU of the {gpu}'s {peak:g} TFLOP/s dense {peak_name} peak "
               f"({source}), an assumed MFU")
    last = last_array_mfu(measured)
    last = (f"; arrays were last measured at {last} MFU" if last is not None
            else "; no array's MFU has been measured")
    rated = ""
    if mine is not None:
        rated = (f"measured on {mine.device} in {precision} ({mine.source}, {mine.date}): arrays of "
                 f"{', '.join(map(str, sorted(mine.rates)))} members at "
                 f"{', '.join(f'{v:.1f}' for _, v in sorted(mine.rates.items()))} member-steps/s with "
                 "the dev evaluation")
    if mine is not None and not unknown:
        between = [n for n in known if n not in mine.rates]
        return rated + (f", the arrays of {', '.join(map(str, between))} interpolated between the "
                        "measured sizes" if between else "") + "; scaled by FLOPs to each run's shapes", True
    if mine is not None:
        return (f"{assumed} for the arrays of {', '.join(map(str, unknown))} members, which no "
                f"measurement covers (measured: arrays of {mine.span()} members; a rate is never "
                f"borrowed from another size){last}"
                + (f"; the arrays of {', '.join(map(str, known))}: " + rated if known else "")), False
    other = [m for m in measured if gpu_of(m.device) == gpu]
    if other:
        ins = sorted({m.precision or "an unrecorded precision" for m in other})
        why = (f"; the {gpu}'s arrays were measured in {' and '.join(ins)} ({', '.join(m.source for m in other)}); "
               f"this plan trains in {precision}{' (TF32 matmuls)' if precision == 'fp32' else ''}, "
               "so no measured rate applies")
    else:
        why = (f"; no measured rate for the {gpu} (bench/gpu_suite.py --json FILE measures one, "
               "--rates FILE uses it)")
    return f"{assumed}{why}{last}", False


def format_estimate(est: Estimate, assumed_gpus: bool = False) -> str:
    """The dry run's lines: what the plan trains, its GPU-hours and wall time, the price table."""
    a = est.arrays
    train = sum(x.train_flops for x in a)
    ev = sum(x.eval_flops for x in a)
    per = "GPU" if est.gpus_per_trial <= 1 else "GPUs"
    sizes = sorted({x.members for x in a})
    shape = (f"{len(a)} array{'s' * (len(a) > 1)} of {sizes[0]}" if len(sizes) == 1 else
             f"{len(a)} arrays of {min(sizes)} to {max(sizes)}")
    lines = [
        "cost: an ESTIMATE, not a measurement (basis below; bench/README.md has the figures)",
        f"  {est.runs} runs in {shape} member{'s' * (max(sizes) != 1)}, "
        f"{est.gpus_per_trial:g} {per} per array"
        f"{' (assumed: --gpus-per-trial not given)' if assumed_gpus else ''}, "
        f"{est.concurrent} array{'s' * (est.concurrent > 1)} at once",
        f"  training: {sum(x.member_steps for x in a):,} member-steps (optimiser steps x runs), "
        f"{train / 1e15:,.0f} PFLOP; evaluation: {sum(x.dev_evaluations for x in a):,} dev evaluations "
        f"and {est.runs} test evaluations over all runs, {ev / 1e15:,.1f} PFLOP",
        f"  on {est.gpu.name}: {est.gpu_hours:,.1f} GPU-hours, {est.wall_seconds / 3600:,.1f} h wall",
        f"  basis: {est.basis}",
        "  assumed: packed or multi-GPU arrays keep one GPU's rate per GPU; arrays start longest first",
    ]
    lines += [f"  warning: {w}" for w in est.warnings]
    lines.append(f"  on-demand price (us-east-1, approximate, as cluster.yaml; check current pricing): "
                 f"the GPU nodes the arrays at once need, plus the head ({HEAD.name}, "
                 f"${HEAD.usd_per_hour:.2f}/h), for the wall time")
    lines.append(f"    {'instance':14s} {'GPUs':>13s} {'$/h':>7s} {'GPU-hours':>10s} {'nodes':>6s} "
                 f"{'wall h':>8s} {'price':>9s}  basis")
    for r in est.prices:
        i = r.instance
        lines.append(f"    {i.name:14s} {f'{i.gpus}x {i.gpu}':>13s} {i.usd_per_hour:7.2f} {r.gpu_hours:10,.1f} "
                     f"{r.nodes:6d} {r.wall_hours:8,.1f} {'$' + format(r.usd, ',.0f'):>9s}  {r.basis}"
                     + (f"; these arrays do not fit its GPU: --array-size {r.fit}" if r.fit else ""))
    return "\n".join(lines)
