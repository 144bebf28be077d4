"""Building an array: its members, their data, heads and teachers, the model and the optimiser.

Built in the order that lets a member that cannot be built fail alone before anything large is
loaded: each distinct data setting opened once and every member's feature sizes checked, each
member's own state (``members.Member``), its student's heads at its own settings, its teachers
(``teachers.py``); then the encoder, stacked over the members that remain (or looped,
``looped.py``), each member's MLP and heads initialised from its own seed, the encoder captured
where the config asks (``capture.py``), and one optimiser over all of it (``optim.py``). A member
whose data, heads or teachers raise is marked failed with the reason (``SetupFailures``) and its
array-mates train; an array none of whose members could be built is refused with every reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trainables.arrays import kernels, teachers
from trainables.arrays.array_model import ArrayModel
from trainables.arrays.capture import capture
from trainables.arrays.looped import build_encoder
from trainables.arrays.members import Member, check_shared, derived_seed
from trainables.arrays.optim import ArrayAdamW, MemberHyper
from trainables.config.run_config import RunConfig
from trainables.data.batches import TrainingData, check_dims, load_data
from trainables.data.corpus import Tokenize
from trainables.models.heads import RESERVED, MethodHeads, simcse_mlp
from trainables.models.pretrained import resolve_encoder
from trainables.models.student import StudentConfig
from trainables.objectives.methods import HeadDims, resolve_heads


class SetupFailures:
    """The members that could not be set up, and why; each reported once."""

    def __init__(self) -> None:
        self.reasons: dict[str, str] = {}
        """member key -> why it could not be set up (a draw that cannot be built, a plug-in
        whose heads do not resolve): it fails alone, with that reason; its array-mates train"""
        self.unreported: list[str] = []
        """keys whose failure no report has carried yet"""

    def attempt(self, key: str, build: Callable[[], Any]) -> Any:
        """``build()``, or None when it raised: the member is marked failed with the reason.
        Running out of memory is the array's problem, not the member's: it is raised."""
        try:
            return build()
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:
            from trainables.runtime.command_line import one_line

            if key not in self.reasons:
                self.reasons[key] = f"could not be set up: {type(e).__name__}: {one_line(e)}"
                self.unreported.append(key)
            return None

    def refuse_if_none(self, members: Sequence[Member]) -> None:
        """Refuse an array none of whose members could be set up, with every reason."""
        if not members:
            raise ValueError("no member of the array could be set up: " + "; ".join(
                f"{k} {why}" for k, why in self.reasons.items()))

    def pop_unreported(self) -> list[dict[str, Any]]:
        """A report entry for each failure not reported yet."""
        out = [{"key": k, "failed": 1, "error": self.reasons[k]} for k in self.unreported]
        self.unreported = []
        return out


@dataclass
class BuiltArray:
    """What ``build_array`` gives an ``ArrayTrainer``."""

    cfg: RunConfig
    """the first member's config: what every member shares (``members.SHARED_FIELDS``)"""
    members: list[Member]
    """the members that could be set up, in the order given"""
    total_steps: int
    tokenizer: Any
    tokenize: Tokenize
    amp: bool
    """bf16 autocast (``RunConfig.precision``)"""
    note: str | None
    """why this array trains slower than a stacked one (looped encoder), or None"""
    student_configs: list[StudentConfig]
    """one per member: its method's heads at its settings"""
    model: ArrayModel
    optimizer: ArrayAdamW
    failures: SetupFailures


def build_array(members: Sequence[tuple[str, RunConfig]], device: torch.device,
                rank: int = 0) -> BuiltArray:
    """Everything an array trains with; rank 0 prints what runs slower than it could."""
    cfgs = check_members(members)
    cfg = cfgs[0]
    failures = SetupFailures()
    built = [m for (k, c), d in zip(members, open_data(cfgs), strict=True)
             if (m := failures.attempt(k, lambda k=k, c=c, d=d: Member(k, c, d, device)))]
    failures.refuse_if_none(built)
    total_steps = common_steps(built)
    source = resolve_encoder(cfg.encoder, cfg.data.cache_dir)
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True)
    tokenize = Tokenize(tokenizer, max_length=cfg.max_length)
    # Each member's heads and teachers before the stacked encoder: a member that cannot be
    # built leaves here, and the encoder stacks only the members that train.
    hidden = AutoConfig.from_pretrained(source).hidden_size
    configs = {m.key: failures.attempt(m.key, lambda m=m: student_config(m, source, hidden))
               for m in built}
    amp = use_precision(cfg, device)
    teachers.build_teachers(built, failures.attempt, failures.reasons, tokenizer, device, amp)
    built = [m for m in built if configs[m.key] and m.key not in failures.reasons]
    failures.refuse_if_none(built)
    encoder = build_encoder(source, len(built))
    if encoder.note and rank == 0:
        print(encoder.note, flush=True)
    student_configs = [configs[m.key] for m in built]
    model = ArrayModel(encoder, *member_heads(encoder, built, student_configs)).to(device)
    uncaptured = capture(model.encoder, cfg.compile, device)
    if uncaptured and rank == 0:
        print(uncaptured, flush=True)
    if rank == 0:
        kernels.announce()  # which AdamW runs, once per process
    optimizer = ArrayAdamW(
        model.stacked_parameters(),
        model.own_parameters(),
        [MemberHyper(m.cfg.lr, m.cfg.weight_decay, m.cfg.adam_eps, m.cfg.grad_clip, m.cfg.optimizer)
         for m in built],
        total_steps,
        apart=model.gathered_parameters(),
    )
    return BuiltArray(cfg, built, total_steps, tokenizer, tokenize, amp, encoder.note,
                      student_configs, model, optimizer, failures)


def check_members(members: Sequence[tuple[str, RunConfig]]) -> list[RunConfig]:
    """The members' configs, once they are known to be able to share an array."""
    if not members:
        raise ValueError("an array needs at least one member")
    keys = [k for k, _ in members]
    if len(set(keys)) != len(keys):
        raise ValueError(f"member keys must be distinct, got {keys}")
    cfgs = [c for _, c in members]
    check_shared(cfgs)
    return cfgs


def common_steps(members: Sequence[Member]) -> int:
    """The step count every member trains (one array steps them together)."""
    steps = {m.total_steps for m in members}
    if len(steps) != 1:
        raise ValueError(f"members of one array must train the same number of steps, got {sorted(steps)}; "
                         "set max_steps or put them in different arrays")
    return int(steps.pop())


def open_data(cfgs: Sequence[RunConfig]) -> list[TrainingData]:
    """Each distinct data setting opened once; dims checked per member before any model."""
    cache: dict[str, TrainingData] = {}
    out = []
    for cfg in cfgs:
        key = json.dumps([cfg.to_dict()["data"], cfg.needs.captions], sort_keys=True)
        if key not in cache:
            cache[key] = load_data(cfg)
        check_dims(cfg, cache[key])
        out.append(cache[key])
    return out


def student_config(m: Member, source: str, hidden: int) -> StudentConfig:
    """The member's student: its method's heads at its own settings and the store's dims."""
    clip_text_dim = m.data.clip_text_dim if m.needs.clip_text else None
    dims = HeadDims(hidden, m.cfg.proj_dim, m.data.image_dim, clip_text_dim)
    try:
        heads = resolve_heads(m.method.heads(m.objective, dims), dims, RESERVED)
    except ValueError as e:
        raise ValueError(f"member {m.key} (method {m.method.name!r}): {e}") from None
    return StudentConfig(encoder=source, method=m.method.name, proj_dim=m.cfg.proj_dim,
                         image_dim=m.data.image_dim, clip_text_dim=clip_text_dim, heads=heads)


def use_precision(cfg: RunConfig, device: torch.device) -> bool:
    """Whether the array trains under bf16 autocast (``RunConfig.precision``); fp32 on CUDA
    allows TF32, as the official runs had it."""
    cuda = device.type == "cuda"
    amp = (cuda and cfg.precision in ("auto", "bf16")) or cfg.precision == "bf16"
    if cuda and not amp:
        # fp32 as the official runs trained it: torch 1.7-1.11 let fp32 matmuls and
        # convolutions use TF32 on Ampere and later by default (a no-op on older GPUs).
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return amp


def member_heads(encoder: Any, members: Sequence[Member],
                 student_configs: Sequence[StudentConfig]) -> tuple[list[torch.nn.Sequential],
                                                                    list[MethodHeads]]:
    """Each member's SimCSE MLP and method heads, initialised from its own seed (the global
    random state is left as it was)."""
    mlps, heads = [], []
    for m, sc in zip(members, student_configs, strict=True):
        with torch.random.fork_rng(devices=[]):  # each member's heads from its own seed
            torch.manual_seed(derived_seed(m.cfg.seed, "init"))
            mlps.append(simcse_mlp(encoder.hidden_size,
                                   getattr(encoder.hf_config, "initializer_range", 0.02)))
            heads.append(MethodHeads(sc.heads))
    return mlps, heads
