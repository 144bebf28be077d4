"""The training loop of one run, free of Ray: the official recipe, made exact on resume.

Official recipe (methods.md 0.2): AdamW (eps 1e-6, no weight decay), linear decay to 0 without
warmup, gradient clipping at 1.0, STS-B dev Spearman every ``eval_every`` steps and at the last
step, the best checkpoint kept when *strictly* better (best starts at 0), and the final seven-task
evaluation on that best checkpoint. Ray Train drives this class through ``trainables.train``; tests
drive it directly, which keeps the determinism and resume checks fast.
"""

from __future__ import annotations

import contextlib
import copy
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainables.config import RunConfig
from trainables.corpus import Tokenize
from trainables.data import Batch, TrainingData, check_dims, load_data
from trainables.evaluation import DevEvaluator, evaluate_sts
from trainables.faults import maybe_inject
from trainables.model import Student, StudentConfig
from trainables.objectives import TeacherInputs, compute_objective
from trainables.profiles import resolve_encoder
from trainables.schedule import BatchSchedule

Report = Callable[[dict[str, Any], Path | None], None]
"""``report(metrics, checkpoint_dir_or_None)``; Ray Train's report in production."""


class NonFiniteLoss(RuntimeError):
    """A loss term became NaN or inf; the message names the step, the term and the config."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class Trainer:
    """One run: model, optimiser, schedule and evaluators, with a resumable state."""

    def __init__(self, cfg: RunConfig, device: torch.device | str = "cpu", rank: int = 0,
                 world: int = 1, wrap_model: Callable[[torch.nn.Module], torch.nn.Module] | None = None):
        self.cfg, self.rank, self.world = cfg, rank, world
        self.config_hash = cfg.config_hash()
        self.device = torch.device(device)
        self.objective = cfg.objective.resolved()
        seed_everything(cfg.seed)  # official: before the model is built
        self.data: TrainingData = load_data(cfg)
        check_dims(cfg, self.data)
        encoder = resolve_encoder(cfg.encoder, cfg.data.cache_dir)
        # Build the CLIP-text head only where the objective uses it (KDMCSE; MCSE + CLIP text).
        clip_text_dim = self.data.clip_text_dim if self.objective.clip_text_term else None
        self.student = Student(StudentConfig(
            encoder=encoder, method=self.objective.method, proj_dim=cfg.proj_dim,
            image_dim=self.data.image_dim, clip_text_dim=clip_text_dim,
        )).to(self.device)
        self.model = wrap_model(self.student) if wrap_model else self.student
        self.tokenize = Tokenize(self.student.tokenizer, max_length=cfg.max_length)
        self.teachers = self._build_teachers()
        cuda = self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(
            self.student.trainable_parameters(), lr=cfg.lr, eps=cfg.adam_eps,
            weight_decay=cfg.weight_decay, fused=cuda,
        )
        self.schedule = BatchSchedule(
            self.data.n_text, self.data.n_pair, cfg.batch_size, cfg.epochs, cfg.seed,
            mode=cfg.schedule,
        )
        self.total_steps = min(self.schedule.total_steps, cfg.max_steps or math.inf)
        total = self.total_steps
        self.lr_sched = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: max(0.0, 1.0 - s / total)
        )
        seed_everything(cfg.seed)  # official: again after the scheduler ("sampler state")
        self.dev = DevEvaluator(self.data.senteval_dir, self.student.tokenizer,
                                batch_size=cfg.eval_batch_size, device=self.device)
        self.amp = cuda and cfg.precision in ("auto", "bf16") or cfg.precision == "bf16"
        self.step = 0
        self.best = 0.0  # official: best starts at 0, replaced only when strictly greater
        self.best_step = -1
        self.best_state: dict[str, torch.Tensor] | None = None
        self.history: list[dict[str, float]] = []
        self._term_sums: dict[str, torch.Tensor] = {}
        self._term_count = 0

    # --- setup ----------------------------------------------------------------------------
    def _build_teachers(self):
        o = self.objective
        if o.method != "dalr" or not (o.use_cma or o.use_ima or o.use_rank or o.use_g2l):
            return None
        from trainables.teachers import TeacherEnsemble, TextTeacher

        paths = [resolve_encoder(t, self.cfg.data.cache_dir) for t in self.cfg.text_teachers]
        if len(paths) != len(o.teacher_weights):
            raise ValueError(
                f"{len(paths)} text teachers but {len(o.teacher_weights)} teacher_weights; "
                "give one weight per teacher (objective.teacher_weights)"
            )
        dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        teachers = [TextTeacher(p, dtype=dtype, student_tokenizer=self.student.tokenizer)
                    .to(self.device) for p in paths]
        ensemble = TeacherEnsemble(teachers, o.teacher_weights)
        # Stored [CLS] columns replace the teachers' forward pass unless g2l needs token states.
        stored = self.data.pairs.feature_columns if self.data.pairs is not None else ()
        if not o.use_g2l and all(c in stored for c in ensemble.columns):
            self.data.teacher_columns = tuple(ensemble.columns)
        return ensemble

    # --- one step -------------------------------------------------------------------------
    def _teacher_inputs(self, batch: Batch) -> TeacherInputs:
        embs: tuple[torch.Tensor, ...] = batch.text_teachers
        local: tuple[torch.Tensor, ...] = ()
        if self.teachers is not None and not embs:
            outs = self.teachers.encode(batch.input_ids, batch.attention_mask)
            embs = tuple(o.emb for o in outs)
            local = tuple(o.local for o in outs) if self.objective.use_g2l else ()
        return TeacherInputs(image=batch.image, clip_text=batch.clip_text,
                             text_teachers=embs, text_teacher_local=local)

    def train_step(self, kind: str, indices: np.ndarray) -> dict[str, torch.Tensor]:
        fault = maybe_inject(self.step + 1, self.config_hash)  # no-op unless a test asks
        shard = indices[self.rank :: self.world]  # DDP: in-batch negatives are per worker
        batch = self.data.batch(kind, shard, self.tokenize, self.device)
        autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if self.amp
                    else contextlib.nullcontext())
        with autocast:
            out = self.model(batch.input_ids, batch.attention_mask,
                             image=batch.image, clip_text=batch.clip_text)
            teacher = self._teacher_inputs(batch) if kind == "pair" else None
            terms = compute_objective(self.objective, out, teacher)
        if fault == "nan":
            terms["total"] = terms["total"] * float("nan")
        # Backward is queued before the host reads the finite flag, so the GPU overlaps the wait;
        # a bad loss still raises before any weight changes.
        terms["total"].backward()
        self._check_finite(terms)
        torch.nn.utils.clip_grad_norm_(self.student.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        self.lr_sched.step()
        self.optimizer.zero_grad(set_to_none=True)
        for k, v in terms.items():
            acc = self._term_sums.get(k)
            self._term_sums[k] = v.detach().float() + (acc if acc is not None else 0.0)
        self._term_count += 1
        return terms

    def _check_finite(self, terms: dict[str, torch.Tensor]) -> None:
        # One stacked isfinite, read on the host: cheap on CPU; on CUDA the single sync per step
        # buys an exact step and term in the error, which a deferred check cannot give.
        names = list(terms)
        ok = torch.isfinite(torch.stack([terms[k].detach().float() for k in names]))
        if not bool(ok.all()):
            bad = [n for n, good in zip(names, ok.tolist(), strict=True) if not good]
            culprit = next((n for n in bad if n != "total"), "total")
            raise NonFiniteLoss(
                f"non-finite loss at step {self.step + 1}: term {culprit!r} is "
                f"{terms[culprit].item()} (config {self.config_hash}); lower lr, check the "
                "features for NaN/inf, or use precision=fp32"
            )

    # --- evaluation -----------------------------------------------------------------------
    def evaluate_dev(self) -> float:
        was_training = self.student.training
        self.student.eval()
        try:
            return self.dev(self.student.encode_ids)
        finally:
            self.student.train(was_training)

    def _eval_and_report(self, report: Report, workdir: Path, epoch: int, t0: float) -> None:
        metrics: dict[str, Any] = {"step": self.step, "epoch": epoch,
                                   "lr": self.lr_sched.get_last_lr()[0]}
        n = max(self._term_count, 1)
        metrics.update({f"loss/{k}": float(v) / n for k, v in self._term_sums.items()})
        self._term_sums, self._term_count = {}, 0
        ckpt_dir = None
        if self.rank == 0:
            score = self.evaluate_dev()
            if score > self.best:
                self.best, self.best_step = score, self.step
                self.best_state = {k: v.detach().to("cpu", copy=True)
                                   for k, v in self.student.state_dict().items()}
            metrics.update(stsb_dev=score, best_stsb_dev=self.best, best_step=self.best_step,
                           elapsed_s=time.time() - t0)
            self.history.append({"step": self.step, "stsb_dev": score})
            ckpt_dir = workdir / f"ckpt-{self.step:07d}"
            self.save_state(ckpt_dir)
        report(metrics, ckpt_dir)

    # --- the run --------------------------------------------------------------------------
    def fit(self, report: Report, workdir: Path) -> dict[str, Any]:
        workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        self.student.train()
        epoch = 0
        for st in self.schedule:
            if self.step >= self.total_steps:
                break
            epoch = st.epoch
            self.train_step(st.kind, st.indices)
            self.step += 1
            if self.step % self.cfg.eval_every == 0 or self.step == self.total_steps:
                self._eval_and_report(report, workdir, epoch, t0)
        final = self.final_metrics() if self.cfg.final_eval and self.rank == 0 else {}
        return final

    def final_metrics(self) -> dict[str, Any]:
        """Seven STS tasks, average, alignment and uniformity of the best checkpoint."""
        if self.best_state is not None:
            self.student.load_state_dict(self.best_state)
        res = evaluate_sts(lambda s: self.student.encode(s, batch_size=self.cfg.eval_batch_size),
                           self.data.senteval_dir)
        out = {f"test/{k}": float(v) for k, v in res.items() if isinstance(v, int | float)}
        out.update(best_stsb_dev=self.best, best_step=self.best_step, steps=self.step)
        return out

    # --- checkpoint -----------------------------------------------------------------------
    def save_state(self, path: Path) -> None:
        """Everything a bit-exact resume needs: weights, optimiser, LR, schedule, every RNG."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        state = {
            "model": self.student.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_sched": self.lr_sched.state_dict(),
            "schedule": self.schedule.state_dict(),
            "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                    "torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
            "trainer": {"step": self.step, "best": self.best, "best_step": self.best_step,
                        "history": self.history, "config_hash": self.cfg.config_hash()},
            # When the best is the current model (the usual case at an eval), don't write the
            # weights twice: a checkpoint of MiniLM shrinks by a quarter, BERT-base by 440 MB.
            "best_state": None if self.best_step == self.step else self.best_state,
            "best_is_model": self.best_step == self.step and self.best_state is not None,
        }
        torch.save(state, tmp / "state.pt")
        tmp.rename(path)

    def load_state(self, path: Path) -> None:
        state = torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)
        tr = state["trainer"]
        if tr["config_hash"] != self.cfg.config_hash():
            raise ValueError(
                f"checkpoint {path} belongs to config {tr['config_hash']}, not "
                f"{self.cfg.config_hash()}; resume with the config that wrote it"
            )
        self.student.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr_sched.load_state_dict(state["lr_sched"])
        self.schedule.load_state_dict(state["schedule"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"]["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        self.step, self.best, self.best_step = tr["step"], tr["best"], tr["best_step"]
        self.history = list(tr["history"])
        self.best_state = state["best_state"]
        if state.get("best_is_model"):
            self.best_state = {k: v.clone() for k, v in state["model"].items()}

    def export_best(self, path: Path) -> Path:
        """Write the best student as a Hugging Face / sentence-transformers folder."""
        student = copy.deepcopy(self.student).cpu()
        if self.best_state is not None:
            student.load_state_dict(self.best_state)
        student.save_pretrained(path)
        return path
