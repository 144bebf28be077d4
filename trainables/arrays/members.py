"""Which runs may share an array, and what each member keeps of its own.

An array trains its members in one process with one stacked encoder, so they must agree on
everything that shapes the shared forward and the shared evaluation: the encoder, the batch size
and token length, the step count, the evaluation cadence and the STS data. Everything else is
per member: objective, learning rate and optimiser settings, seed (data order, dropout stream,
head init), data options such as the image column, teachers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from trainables.config.run_config import RunConfig
from trainables.data.schedule import BatchSchedule
from trainables.objectives.methods import Settings, method_of

if TYPE_CHECKING:
    from trainables.arrays.stacked_teachers import StackedTeachers
    from trainables.data.batches import TrainingData

SHARED_FIELDS = ("encoder", "batch_size", "max_length", "eval_every", "eval_batch_size",
                 "precision", "num_workers", "use_gpu", "final_eval", "compile")
"""RunConfig fields every member of an array must share (the step count is checked as well)."""


def array_key(cfg: RunConfig, total_steps: int) -> str:
    """Members with equal keys can train in one array."""
    d = cfg.to_dict()
    shared = {k: d[k] for k in SHARED_FIELDS}
    shared["senteval"] = d["data"]["senteval"] if not d["data"]["demo"] else ["demo", d["data"]]
    shared["total_steps"] = total_steps
    return hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:12]


def check_shared(cfgs: list[RunConfig]) -> None:
    """One clear line naming the first field on which members disagree."""
    first = cfgs[0].to_dict()
    for cfg in cfgs[1:]:
        d = cfg.to_dict()
        for k in SHARED_FIELDS:
            if d[k] != first[k]:
                raise ValueError(
                    f"members of one array must share {k!r} ({first[k]!r} vs {d[k]!r}); "
                    "put them in different arrays (--array-size) or align the configs"
                )
        if d["data"]["demo"] != first["data"]["demo"] or d["data"]["senteval"] != first["data"]["senteval"]:
            raise ValueError("members of one array must evaluate on the same STS data (data.senteval)")


METHOD_STREAM = "listmle"
"""the name ``Member.method_rng``'s seed is derived under: the name of its first user (DALR's
ListMLE), kept because a new name would change every member's draws"""


def derived_seed(seed: int, stream: str) -> int:
    """A 63-bit seed for one of a member's private streams (dropout, its method's draws, heads)."""
    h = hashlib.sha256(f"{seed}:{stream}".encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


def generator(seed: int, stream: str, device: torch.device | str) -> torch.Generator:
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(derived_seed(seed, stream))
    return g


@dataclass
class MemberRecord:
    """A member's bookkeeping: best dev score and its weights, dev curve, loss sums, fate."""

    key: str
    config_hash: str
    best: float = 0.0  # official: best starts at 0, replaced only when strictly greater
    best_step: int = -1
    best_state: dict[str, Any] | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    term_steps: list[dict[str, torch.Tensor]] = field(default_factory=list)
    """every step's loss terms since the last report (detached)"""
    term_count: int = 0
    error: str | None = None
    """why the member left the array (a non-finite loss), None while it trains"""
    pruned_at: int | None = None
    """the step at which successive halving dropped it (search arrays)"""
    masked: list[float] = field(default_factory=list)
    """threshold filter: share of negatives masked in each caption batch since the last report"""
    fully_masked_run: int = 0
    """consecutive caption batches in which the filter masked every negative"""

    def add_terms(self, terms: dict[str, torch.Tensor]) -> None:
        # Kept, not added up: an add per term and member at every step would be a kernel launch
        # each; they are summed once, at the next report.
        self.term_steps.append({k: v.detach() for k, v in terms.items()})
        self.term_count += 1

    def pop_means(self, step: int | None = None, every: int = 0) -> dict[str, float]:
        """Each loss term's mean over the steps since the last report (``loss/<term>``); with
        ``step`` (the step now) and ``every``, the means over each ``every`` steps as well, as
        ``loss/<term>@<step of the chunk's last step>``, so a run's term history is a curve
        (read back in the same one transfer)."""
        n = max(self.term_count, 1)
        per_step = [list(t.items()) for t in self.term_steps]
        keys = [k for t in per_step for k, _ in t]
        vals = (torch.stack([v.float() for t in per_step for _, v in t]).tolist()
                if keys else [])
        sums: dict[str, float] = {}
        for k, v in zip(keys, vals, strict=True):
            sums[k] = sums.get(k, 0.0) + v
        out = {f"loss/{k}": v / n for k, v in sums.items()}
        if every > 0 and step is not None and per_step:
            first = step - len(per_step) + 1
            chunks: dict[int, dict[str, list[float]]] = {}
            it = iter(vals)
            for i, terms in enumerate(per_step):
                end = min(step, -(-(first + i) // every) * every)  # the chunk's last step
                for k, _ in terms:
                    chunks.setdefault(end, {}).setdefault(k, []).append(next(it))
            for end, terms in chunks.items():
                for k, got in terms.items():
                    out[f"loss/{k}@{end}"] = sum(got) / len(got)
        self.term_steps = []
        if self.masked:
            out["filter/masked_fraction"] = sum(self.masked) / len(self.masked)
        self.term_count, self.masked = 0, []
        return out

    def bookkeeping(self) -> dict[str, Any]:
        return {"key": self.key, "config_hash": self.config_hash, "best": self.best,
                "best_step": self.best_step, "history": self.history, "error": self.error,
                "pruned_at": self.pruned_at, "masked": self.masked,
                "fully_masked_run": self.fully_masked_run}

    def restore(self, d: dict[str, Any]) -> None:
        self.best, self.best_step = d["best"], d["best_step"]
        self.history, self.error = list(d["history"]), d["error"]
        self.pruned_at = d.get("pruned_at")
        self.masked, self.fully_masked_run = list(d.get("masked", [])), d.get("fully_masked_run", 0)


class Member:
    """One run inside the array: its config, data, schedule, private RNG streams and record."""

    def __init__(self, key: str, cfg: RunConfig, data: TrainingData, device: torch.device):
        self.key, self.cfg = key, cfg
        if not isinstance(cfg.objective, Settings):
            raise ValueError(f"member {key}: its objective is not a method's settings; build its "
                             "config with build_config or RunConfig.resolved()")
        self.objective: Settings = cfg.objective
        self.method = method_of(cfg.objective)
        self.needs = self.method.needs(cfg.objective)
        self.filter = self.method.negative_filter(cfg.objective)
        self.data = data
        self.teachers = None
        self.teacher_columns: tuple[str, ...] = ()
        self.teacher_index: tuple[int, ...] = ()
        """per configured text teacher, its model in ``teachers`` when one model is named twice"""
        self.teacher_stack: StackedTeachers | None = None
        """``teachers`` as one stacked forward, shared by the members with the same teachers
        (None: they run one after the other, or stored columns replace them)"""
        # max_steps as the official --max_train_steps: above epochs x steps_per_epoch it adds
        # epochs (the loaders go on reshuffling), and the LR decays over it either way
        self.schedule = BatchSchedule(data.n_text, data.n_pair, cfg.batch_size, cfg.epochs,
                                      cfg.seed, mode=cfg.schedule, max_steps=cfg.max_steps)
        self.total_steps = self.schedule.total_steps
        self.dropout = generator(cfg.seed, "dropout", device)
        self.method_rng = generator(cfg.seed, METHOD_STREAM, "cpu")
        """every method's random stream: what its loss draws (DALR's ListMLE tie-breaks, a
        plug-in's declared permutations, ``Needs.permutations``)"""
        self.record = MemberRecord(key, cfg.config_hash())

    @property
    def needs_teachers(self) -> bool:
        return self.needs.text_teachers


def slug(key: str) -> str:
    """A member key as a folder name ('kdmcse/seed-0' -> 'kdmcse__seed-0')."""
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in key.replace("/", "__"))


def pad_to(x: torch.Tensor, rows: int, cols: int, value: int) -> torch.Tensor:
    """(n, l) -> (rows, cols), new rows and columns filled with ``value``."""
    if x.shape == (rows, cols):
        return x
    return torch.nn.functional.pad(x, (0, cols - x.shape[1], 0, rows - x.shape[0]), value=value)
