"""The training loop of an array: M runs trained together, each exactly as it would train alone.

Per member, exactly as one run of the official recipe: its own data order (its seed's batch
schedule), dropout stream, head init (the heads its method declares), objective (any registered
method: built-in or a plug-in) and hyperparameters, AdamW state, gradient clipping and linear LR
decay, STS-B dev Spearman every ``eval_every`` steps and at the last
step, the best weights kept when *strictly* better (best starts at 0), and the final seven-task
evaluation of those best weights. Shared, and done once: the encoder's forward and backward (one
batched pass over every member's batch), a text teacher's forward over all the members that use
it, the tokenised dev and test sentences. An encoder the stacked one cannot express
(DistilBERT, MPNet, ...) runs through ``looped.py``: one Hugging Face model per member, the rest
of the loop unchanged, and one printed line saying why it is slower.

Member independence is the contract: a member's losses, dev curve and scores depend only on its
own config and seed, never on which members share its array or where it sits (tested in
tests/trainables/arrays/test_trainer.py). A member whose loss turns NaN/inf leaves the array with
its step and term recorded; the others go on. Ray Train drives this class through
``trainables.train``; tests drive it directly.

This module is the loop: one step (``train_step``: batches, the stacked forward, the teachers,
the heads and losses, backward, the finite check, the optimiser) and the run around it (``fit``:
evaluations, reports, checkpoints). What it calls lives beside it, one concept a module:
``build.py`` (building an array), ``teachers.py``, ``batched.py`` (the heads and loss terms),
``finite_check.py``, ``optim.py``, ``halving.py``, ``final_eval.py`` and ``checkpoint.py``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.profiler import record_function

from trainables.arrays import checkpoint, final_eval, teachers
from trainables.arrays.batched import MethodGroups
from trainables.arrays.build import build_array
from trainables.arrays.capture import whole_step
from trainables.arrays.finite_check import FiniteCheck
from trainables.arrays.halving import Halving
from trainables.arrays.members import Member, pad_to
from trainables.config.run_config import RunConfig
from trainables.data.batches import Batch
from trainables.evaluation.sts import DevEvaluator
from trainables.runtime.faults import maybe_inject

Report = Callable[[dict[str, Any], Path | None], None]
"""``report(metrics, checkpoint_dir_or_None)``; Ray Train's report in production."""
Progress = Callable[[dict[str, Any]], None]
"""``progress({"step", "total_steps"[, "evaluating"]})``: where the array stands, for the live
view; ``evaluating`` names the final evaluation under way ("STS", "transfer SST2 (5/7)")"""
PROGRESS_S = 10.0
"""seconds between two progress calls while the array trains"""
LOSS_POINTS = 20
"""points of each loss term's history a run logs (means over total_steps / LOSS_POINTS steps),
read back with the evaluations' reports: a curve, not one point per evaluation"""



class ArrayTrainer:
    """M members, one stacked model, one optimiser state with a member axis, resumable."""

    def __init__(self, members: Sequence[tuple[str, RunConfig]], device: torch.device | str = "cpu",
                 rank: int = 0, world: int = 1,
                 halving: tuple[Sequence[int], float] | None = None,
                 groups: dict[str, str] | None = None):
        self.rank, self.world = rank, world
        self.device = torch.device(device)
        built = build_array(members, self.device, rank)
        self.cfg, self.members, self.total_steps = built.cfg, built.members, built.total_steps
        self.tokenizer, self.tokenize, self.amp = built.tokenizer, built.tokenize, built.amp
        self.loss_every = max(1, self.total_steps // LOSS_POINTS)
        self.note = built.note
        """why this array trains slower than a stacked one, or None (printed once, at build)"""
        self.student_configs = built.student_configs
        self.model, self.optimizer = built.model, built.optimizer
        self.setup = built.failures
        """the members that could not be set up, and why"""
        self.alive: list[Member] = list(self.members)
        self.dev = DevEvaluator(self.members[0].data.senteval_dir, self.tokenizer,
                                batch_size=self.cfg.eval_batch_size, device=self.device)
        self.step = 0
        self.finite = FiniteCheck(world)
        self._failed_unreported: list[Member] = []
        # Search arrays: member groups (a configuration's seeds) halved at the rung steps.
        self.halving = Halving.of(halving, groups, [m.key for m in self.members])
        # Each member's heads and loss terms: one batched computation per method (batched.py).
        self.objectives = MethodGroups(self)
        # compile=graphs: the step, forward to update, as one captured function (capture.py)
        self.whole = whole_step(self, self.cfg.compile)

    # --- one step -------------------------------------------------------------------------
    def train_step(self) -> dict[str, dict[str, torch.Tensor]]:
        """One optimiser step of every member alive; returns each member's loss terms."""
        step = self.step + 1
        batches: list[tuple[str, Batch]] = []
        with record_function("array/batches"):  # phase names for bench/profile_step.py
            for m in self.alive:
                st = next(m.schedule)
                idx = st.indices[self.rank :: self.world]  # DDP: in-batch negatives are per worker
                batches.append((st.kind, m.data.batch(st.kind, idx, self.tokenize, self.device,
                                                      teacher_columns=m.teacher_columns)))
        poisoned = maybe_inject(step, [m.record.config_hash for m in self.alive])
        ids, mask, mask1, extents = self._stacked_inputs(batches)
        key = None
        if self.whole is not None:  # compile=graphs: the whole step as one captured function
            key = self.whole.structure(batches)
            if self.whole.ready(key, poisoned):
                with record_function("array/captured"):
                    all_terms, bad = self.whole.run(key, batches, ids, mask, mask1, extents, step)
                return self._end_step(step, all_terms, bad)
        # On the parameters' device: autocast("cuda") would leave precision=bf16 on CPU in fp32.
        autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16) if self.amp
                    else contextlib.nullcontext())
        pad = self.tokenizer.pad_token_id or 0
        with autocast:
            with record_function("array/student"):
                cls = self.model.cls(ids, mask, [m.dropout for m in self.alive], extents)
                z = self.model.mlp(cls)
            with record_function("array/teachers"):
                teach = teachers.teacher_outputs(self.alive, batches, pad)
            with record_function("array/objectives"):
                all_terms, masked, total = self.objectives.terms(batches, cls, z, mask1, teach,
                                                                 poisoned)
        # Backward is queued before the host reads the finite flags, so the GPU overlaps the wait;
        # a member with a bad loss leaves before any weight changes.
        with record_function("array/backward"):
            total.backward()
        if key is not None and not poisoned:  # what a captured step of this structure reaches
            self.whole.learn(key, all_terms, masked, self.objectives.errors)
        if self.world > 1:
            self._all_reduce_grads()
        with record_function("array/inspect"):
            bad = self.finite.members_to_drop(self.alive, all_terms, masked,
                                               self.objectives.errors, step)
        if bad:
            self._drop(bad)
            all_terms = [t for j, t in enumerate(all_terms) if j not in bad]
            bad = {}
        with record_function("array/optimizer"):
            if self.alive:
                self.optimizer.clip()
                self.optimizer.step()
            self.optimizer.zero_grad()
        return self._end_step(step, all_terms, bad)

    def _stacked_inputs(self, batches: list[tuple[str, Batch]]
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[list[int], list[int]]]:
        """The members' batches as the stacked encoder reads them: (ids, mask) of both dropout
        views, (M, 2 rows, L) (rows 2i and 2i+1 are sentence i), the one-view mask (M, rows, L)
        and each member's extent (its rows of both views and its length, from its batch's shape:
        no read-back)."""
        rows = max(b.input_ids.shape[0] for _, b in batches)
        length = max(b.input_ids.shape[1] for _, b in batches)
        if self.cfg.compile == "graphs":  # one shape at every step: what a CUDA graph replays
            rows, length = max(rows, -(-self.cfg.batch_size // self.world)), self.cfg.max_length
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.stack([pad_to(b.input_ids, rows, length, pad) for _, b in batches])
        mask1 = torch.stack([pad_to(b.attention_mask, rows, length, 0) for _, b in batches])
        # Two dropout views of each sentence from one pass: rows 2i and 2i+1 are sentence i.
        ids, mask = ids.repeat_interleave(2, dim=1), mask1.repeat_interleave(2, dim=1)
        extents = ([2 * b.input_ids.shape[0] for _, b in batches],
                   [b.attention_mask.shape[1] for _, b in batches])
        return ids, mask, mask1, extents

    def _end_step(self, step: int, all_terms: list[dict[str, torch.Tensor]],
                  bad: dict[int, str]) -> dict[str, dict[str, torch.Tensor]]:
        """The members ``bad`` leave (a captured step's: their weights did not change), the
        others' terms are recorded; -> each member's terms."""
        if bad:
            self._drop(bad)
            all_terms = [t for j, t in enumerate(all_terms) if j not in bad]
        for m, terms in zip(self.alive, all_terms, strict=True):
            m.record.add_terms(terms)
        self.step = step
        # Detached: a caller holding a step's terms must not keep its graph, whose nodes remember
        # the parameters' shapes from before a member left.
        return {m.key: {k: v.detach() for k, v in t.items()} for m, t in zip(self.alive, all_terms, strict=True)}

    def _drop(self, bad: dict[int, str]) -> None:
        for j, why in bad.items():
            self.alive[j].record.error = why
            self._failed_unreported.append(self.alive[j])
        self._keep([j for j in range(len(self.alive)) if j not in bad])

    def _keep(self, idx: list[int]) -> None:
        """Only members ``idx`` (among the alive, in that order) go on: the model's and the
        optimiser's member axes and the list of the alive, in step."""
        if idx:  # when every member left, the array is over: nothing to select
            self.model.select(idx)
            self.optimizer.select(idx, self.model.stacked_parameters())
        self.alive = [self.alive[j] for j in idx]

    def _all_reduce_grads(self) -> None:
        import torch.distributed as dist

        flat = self.optimizer.flat
        laid_out: set[int] = set()
        if flat is not None:  # the optimiser's buffer of stacked gradients: one call, in place
            flat.sync()
            dist.all_reduce(flat.grad)
            flat.grad /= self.world
            laid_out = {id(p) for p in flat.params}
        # the rest (tensors kept apart from the buffer, the heads) in one concatenation
        params = [p for p in self.model.parameters() if p.requires_grad and id(p) not in laid_out]
        if not params:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        joined = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(joined)
        joined /= self.world
        start = 0
        for p, g in zip(params, grads, strict=True):
            n = g.numel()
            p.grad = joined[start : start + n].view_as(p).clone()
            start += n

    # --- evaluation -----------------------------------------------------------------------
    @torch.no_grad()
    def evaluate_dev(self) -> list[float]:
        """STS-B dev Spearman x 100 of every member alive (no dropout), one pass for all."""
        return self.dev.scores_many(lambda ids, mask: self.model.cls(ids, mask))

    def encode_many(self, sentences: list[str]) -> torch.Tensor:
        """(M, n, H) evaluation embeddings of every member alive (``final_eval.encode_many``)."""
        return final_eval.encode_many(self.model, self.tokenizer, self.device, sentences)

    def _eval_and_report(self, report: Report, workdir: Path, epoch: int, t0: float) -> None:
        metrics: dict[str, Any] = {"step": self.step, "epoch": epoch, "members": []}
        if self.objectives.looped:  # methods vmap could not run: the driver tags their runs
            metrics["one_by_one"] = dict(self.objectives.looped)
        lrs = self.optimizer.current_lrs()
        scores = self.evaluate_dev() if self.rank == 0 else [math.nan] * len(self.alive)
        for j, m in enumerate(self.alive):
            mm = {"key": m.key, "lr": lrs[j], **m.record.pop_means(self.step, self.loss_every)}
            if self.rank == 0:
                r = m.record
                if scores[j] > r.best:
                    r.best, r.best_step = scores[j], self.step
                    r.best_state = self.model.member_state(j)
                r.history.append({"step": self.step, "stsb_dev": scores[j]})
                mm.update(stsb_dev=scores[j], best_stsb_dev=r.best, best_step=r.best_step,
                          elapsed_s=time.time() - t0)
            metrics["members"].append(mm)
        if self.step in self.halving.rungs:  # every rank: they must keep the same members
            metrics["members"] += self._halve(dict(zip([m.key for m in self.alive], scores, strict=True)))
        metrics["members"] += self._failures()
        ckpt_dir = None
        if self.rank == 0:
            ckpt_dir = workdir / f"ckpt-{self.step:07d}"
            self.save_state(ckpt_dir)
        report(metrics, ckpt_dir)

    def _halve(self, scores: dict[str, float]) -> list[dict[str, Any]]:
        """Successive halving at a rung (``halving.py``): the members of the groups not kept
        leave the array; their report entries."""
        keep = self.halving.groups_to_keep(self.alive, scores, self.rank, self.world)
        kept, out = self.halving.prune(self.alive, keep, self.step)
        if len(kept) < len(self.alive):
            self._keep(kept)
        return out

    def _failures(self) -> list[dict[str, Any]]:
        out = self.setup.pop_unreported()
        out += [{"key": m.key, "failed": 1, "error": m.record.error} for m in self._failed_unreported]
        self._failed_unreported = []
        return out

    @property
    def failed(self) -> dict[str, str]:
        """Every member that failed, set up or training, -> why (one line each)."""
        return {**self.setup.reasons, **{m.key: m.record.error for m in self.members if m.record.error}}

    # --- the run --------------------------------------------------------------------------
    def fit(self, report: Report, workdir: Path,
            progress: Progress | None = None) -> dict[str, dict[str, Any]]:
        """Train every member to the end; returns key -> final metrics of the members that finished.
        ``progress`` (rank 0's, or None) hears the step at the start and every ``PROGRESS_S``."""
        workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        self.model.train()
        epoch = 0
        told = -math.inf
        while self.step < self.total_steps and self.alive:
            if progress is not None and time.monotonic() - told >= PROGRESS_S:
                progress({"step": self.step, "total_steps": self.total_steps})
                told = time.monotonic()
            epoch = self.alive[0].schedule.global_step // self.alive[0].schedule.steps_per_epoch
            self.train_step()
            if self.alive and (self.step % self.cfg.eval_every == 0 or self.step == self.total_steps):
                self._eval_and_report(report, workdir, epoch, t0)
        if self._failed_unreported or self.setup.unreported:  # left between evaluations
            report({"step": self.step, "epoch": epoch, "members": self._failures()}, None)
        return self.final_metrics(progress) if self.cfg.final_eval and self.rank == 0 else {}

    def final_metrics(self, progress: Progress | None = None) -> dict[str, dict[str, Any]]:
        """Seven STS tasks, average, alignment and uniformity of each member's best weights (and
        the transfer tasks of the members whose config asks for them). ``progress`` hears each
        evaluation as it starts: the transfer tasks can take an hour on a CPU."""
        if not self.alive:
            return {}

        def tell(what: str) -> None:
            if progress is not None:
                progress({"step": self.step, "total_steps": self.total_steps, "evaluating": what})

        return final_eval.final_metrics(self.model, self.alive, self.encode_many,
                                        self.members[0].data.senteval_dir,
                                        self.cfg.eval_batch_size, self.step, tell)

    # --- checkpoint (checkpoint.py) ------------------------------------------------------
    def save_state(self, path: Path) -> None:
        """Everything a bit-exact resume needs: weights, optimiser, schedules, every RNG stream."""
        checkpoint.save_state(path, self.members, self.alive, self.step, self.model, self.optimizer)

    def load_state(self, path: Path) -> None:
        """Continue from a checkpoint this array wrote (another array's is refused)."""
        state = checkpoint.read_state(path, self.members)
        alive = set(state["alive"])
        keep = [j for j, m in enumerate(self.alive) if m.key in alive]
        if len(keep) != len(self.alive):
            self._keep(keep)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        checkpoint.restore_members(state["members"], self.members, self.alive, self.model)

    def last_evaluation(self) -> dict[str, Any]:
        """The report of the evaluation the loaded checkpoint was written at, to send again."""
        return checkpoint.last_evaluation(self.alive, self.step)

    def export_best(self, root: Path) -> dict[str, Path]:
        """Each finished member's best student as an MLflow model; key -> its folder."""
        return checkpoint.export_best(root, self.alive, self.members, self.student_configs,
                                      self.model)
