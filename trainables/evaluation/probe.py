"""SentEval's logistic-regression probe, many fits trained at once as one batched model.

A *fit* is one call of SentEval's ``MLP(nhid=0).fit`` (``senteval/tools/classifier.py``): a linear
layer ``nn.Linear(dim, nclasses)`` initialised under ``torch.manual_seed(seed)``, cross-entropy
with a mean over the batch, Adam or RMSprop with torch's defaults and ``weight_decay`` = the L2
penalty (added to the gradient, bias included), minibatches in a fresh ``np.random.permutation``
order each epoch after ``np.random.seed(seed)``, and an evaluation on the validation rows after
every ``epoch_size`` epochs. The best model by validation accuracy is kept; training stops once
the accuracy has failed to improve ``tenacity + 1`` times (a running count, never reset) or after
``max_epoch`` epochs (the loop runs while ``nepoch <= max_epoch``). Without validation rows, 5% of
the training rows (the first ``int(0.05 n)`` of a seeded permutation) are held out for it.

On the loss: SentEval sets ``loss_fn.size_average = False`` after building ``CrossEntropyLoss``;
since torch 0.4.1 the module reads ``reduction``, fixed at construction, so that line has no effect
and the loss the published numbers were computed with is the batch mean. So it is here.

Batching: the selection step of a task is dozens to hundreds of fits (4 penalties x 10 folds, x 10
outer folds for MR/CR/SUBJ/MPQA). Fits that share their training and validation rows also share
their data order (it depends on the seed and the row count only), so they form a *group* with one
member per penalty; all groups train together as one model with a leading group axis. Each member
keeps its own weights, optimiser moments, step count, best weights and early stopping; a group
leaves the batch once all its members have stopped. Nothing crosses members, so each fit computes
what it would alone, in the same order; what can differ is floating-point rounding (a batched
matrix product instead of one ``addmm``, analytic gradients instead of autograd), about 1e-7
relative per step. bench/README.md records the results on real embeddings fitted both ways
(identical accuracies).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

SEED = 1111
"""SentEval's default seed (classifier init, data order, and the folds)"""
L2_GRID: tuple[float, ...] = tuple(10**t for t in range(-5, -1))
"""SentEval's L2 penalties with ``usepytorch``: 1e-5, 1e-4, 1e-3, 1e-2"""
VALIDATION_SPLIT = 0.05
"""share of the training rows held out for early stopping when a fit has no validation rows"""


@dataclass(frozen=True)
class ProbeConfig:
    """SentEval's ``params['classifier']`` and ``kfold``, as SimCSE's ``evaluation.py`` sets them."""

    name: str
    """'full' (SimCSE's test mode) or 'fast' (its fasttest mode)"""
    kfold: int
    """folds of the cross-validations"""
    optim: str
    """'adam' or 'rmsprop', with torch's default settings (SentEval's ``get_optimizer``)"""
    batch_size: int
    tenacity: int
    """evaluations without improvement tolerated before stopping (a running count)"""
    epoch_size: int
    """epochs between two evaluations on the validation rows"""
    max_epoch: int = 200

    def describe(self) -> str:
        return (f"{self.name}: {self.kfold}-fold, {self.optim}, batch {self.batch_size}, "
                f"tenacity {self.tenacity}, epoch size {self.epoch_size}")


PROBES = {
    "full": ProbeConfig("full", kfold=10, optim="adam", batch_size=64, tenacity=5, epoch_size=4),
    "fast": ProbeConfig("fast", kfold=5, optim="rmsprop", batch_size=128, tenacity=3, epoch_size=2),
}
"""SimCSE ``evaluation.py --mode test`` ('full') and ``--mode fasttest`` ('fast')"""


def probe_config(mode: str | ProbeConfig) -> ProbeConfig:
    if isinstance(mode, ProbeConfig):
        return mode
    if mode not in PROBES:
        raise ValueError(f"transfer mode {mode!r} unknown; use 'full' (SentEval's test protocol) "
                         "or 'fast' (its fasttest protocol)")
    return PROBES[mode]


@dataclass(frozen=True, eq=False)
class FitGroup:
    """Fits on the same rows, one per L2 penalty (they share the data order)."""

    train: np.ndarray
    """row indices of the training samples, in the order SentEval holds them"""
    valid: np.ndarray | None
    """row indices of the validation samples; None: SentEval's ``validation_split=0.05``"""
    l2regs: tuple[float, ...]


@dataclass(frozen=True, eq=False)
class Fit:
    """The kept (best) model of one fit and its validation accuracy."""

    weight: torch.Tensor
    """(nclasses, dim), ``nn.Linear`` layout"""
    bias: torch.Tensor
    valid_acc: float
    """correct / n on the validation rows: SentEval's ``bestaccuracy``"""
    epochs: int
    """epochs trained when the fit stopped"""

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x, self.weight.T).argmax(1)


def init_linear(dim: int, nclasses: int, seed: int = SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """``nn.Linear(dim, nclasses)``'s weights after ``torch.manual_seed(seed)``, from a private
    generator (the global RNG, and so the caller's streams, stay untouched)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.empty(nclasses, dim)
    torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=g)
    bound = 1 / math.sqrt(dim) if dim > 0 else 0.0
    b = torch.empty(nclasses).uniform_(-bound, bound, generator=g)
    return w, b


class _Optim:
    """torch's Adam / RMSprop (default settings, coupled weight decay) on stacked tensors, each
    group with its own step count, the weight decay per member."""

    def __init__(self, kind: str, params: list[torch.Tensor]):
        if kind not in ("adam", "rmsprop"):
            raise ValueError(f"optimiser {kind!r} unknown; SentEval's probe uses 'adam' or 'rmsprop'")
        self.kind = kind
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = np.zeros(len(params[0]), dtype=np.int64)

    def select(self, keep: torch.Tensor) -> None:
        self.m = [m[keep] for m in self.m]
        self.v = [v[keep] for v in self.v]
        self.t = self.t[keep.numpy()]

    def step(self, params: list[torch.Tensor], grads: list[torch.Tensor], wd: torch.Tensor,
             rows: torch.Tensor | None) -> None:
        """One update of the groups ``rows`` (None: all); ``wd`` broadcasts against a parameter."""
        if rows is None:
            self._update(params, grads, self.m, self.v, wd, self.t)
            return
        idx = rows.numpy()
        p = [x[rows] for x in params]
        m, v = [x[rows] for x in self.m], [x[rows] for x in self.v]
        t = self.t[idx]
        self._update(p, [gr[rows] for gr in grads], m, v, wd[rows], t)
        self.t[idx] = t
        for full, part in zip((*params, *self.m, *self.v), (*p, *m, *v), strict=True):
            full[rows] = part

    def _update(self, params, grads, ms, vs, wd, t: np.ndarray) -> None:
        t += 1
        if self.kind == "rmsprop":  # lr 1e-2, alpha 0.99, eps 1e-8, no momentum, not centred
            for p, g, v in zip(params, grads, vs, strict=True):
                g = g.add(p * wd)
                v.mul_(0.99).addcmul_(g, g, value=1 - 0.99)
                p.addcdiv_(g, v.sqrt().add_(1e-8), value=-1e-2)
            return
        # Adam: lr 1e-3, betas (0.9, 0.999), eps 1e-8; bias corrections per group
        shape = (-1,) + (1,) * (params[0].dim() - 1)
        if (t == t[0]).all():  # the usual case: python scalars, as torch computes them
            bc1, bc2 = 1 - 0.9 ** int(t[0]), 1 - 0.999 ** int(t[0])
            step_size, bc2_sqrt = 1e-3 / bc1, bc2**0.5
        else:
            bc1, bc2 = 1 - 0.9 ** t.astype(np.float64), 1 - 0.999 ** t.astype(np.float64)
            step_size = torch.from_numpy(1e-3 / bc1).float().view(shape)
            bc2_sqrt = torch.from_numpy(bc2**0.5).float().view(shape)
        for p, g, m, v in zip(params, grads, ms, vs, strict=True):
            g = g.add(p * wd)
            m.lerp_(g, 1 - 0.9)
            v.mul_(0.999).addcmul_(g, g, value=1 - 0.999)
            denom = (v.sqrt() / bc2_sqrt).add_(1e-8)
            if isinstance(step_size, float):
                p.addcdiv_(m, denom, value=-step_size)
            else:
                p.sub_(m * step_size / denom)


def _padded(rows: Sequence[np.ndarray], width: int | None = None) -> torch.Tensor:
    """Row-index lists -> (len(rows), width) long tensor padded with -1."""
    width = max((len(r) for r in rows), default=0) if width is None else width
    out = np.full((len(rows), width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out)


def _correct(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
             rows: torch.Tensor, nclasses: int, chunk_floats: int = 1 << 23) -> np.ndarray:
    """(G, R) correct predictions of every member of every group on its own rows (-1 = padding)."""
    g_total, width = rows.shape
    per = max(1, chunk_floats // max(1, width * x.shape[1]))
    out = []
    for s in range(0, g_total, per):
        r = rows[s : s + per]
        valid = r >= 0
        logits = torch.baddbmm(b[s : s + per], x[r.clamp(min=0)], w[s : s + per])
        pred = logits.view(len(r), width, -1, nclasses).argmax(-1)  # (g, width, R)
        hit = (pred == y[r.clamp(min=0)].unsqueeze(-1)) & valid.unsqueeze(-1)
        out.append(hit.sum(1))
    return torch.cat(out).numpy().astype(np.int64)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread, then restore the caller's setting. The probe's tensors are
    small, and on a shared machine a second thread cost about ten times the CPU (the threads wait
    for a busy core; bench/README.md has the figures)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fit_many(x: torch.Tensor, y: torch.Tensor, nclasses: int, groups: Sequence[FitGroup],
             probe: ProbeConfig, seed: int = SEED) -> list[list[Fit]]:
    """Train every fit of ``groups`` on rows of ``x`` (n, dim) / ``y`` (n,) -> [group][penalty].

    Every group must hold the same number of penalties. Each fit does what SentEval's
    ``MLP(...).fit`` does on its rows (module docstring). Runs on one torch thread.
    """
    if not groups:
        return []
    with one_thread():
        return _fit_many(x, y, nclasses, groups, probe, seed)


def _fit_many(x: torch.Tensor, y: torch.Tensor, nclasses: int, groups: Sequence[FitGroup],
              probe: ProbeConfig, seed: int) -> list[list[Fit]]:
    n_regs = len(groups[0].l2regs)
    if n_regs == 0 or any(len(g.l2regs) != n_regs for g in groups):
        raise ValueError("every group of one fit_many call must hold the same number (>= 1) of penalties")
    x = x.float().contiguous()
    y = y.long()
    dim, c = x.shape[1], nclasses
    y_hot = torch.nn.functional.one_hot(y, c).float()
    bs = probe.batch_size

    # Each fit's data order: a RandomState seeded like SentEval's np.random.seed(seed).
    rngs, train, valid = [], [], []
    for g in groups:
        rs = np.random.RandomState(seed)
        tr = np.asarray(g.train, dtype=np.int64)
        if g.valid is None:
            perm = rs.permutation(len(tr))
            k = int(VALIDATION_SPLIT * len(tr))
            tr, va = tr[perm[k:]], tr[perm[:k]]
        else:
            va = np.asarray(g.valid, dtype=np.int64)
        if len(tr) == 0 or len(va) == 0:
            raise ValueError(f"a fit needs training and validation rows, got {len(tr)} and {len(va)}")
        rngs.append(rs)
        train.append(tr)
        valid.append(va)

    w0, b0 = init_linear(dim, c, seed)
    n_groups = len(groups)
    w = w0.T.repeat(n_groups, 1, n_regs).contiguous()  # (G, dim, R*C): member r = columns r*C..
    b = b0.repeat(n_groups, 1, n_regs).contiguous()  # (G, 1, R*C)
    wd = torch.tensor([[r for r in g.l2regs for _ in range(c)] for g in groups],
                      dtype=torch.float32).unsqueeze(1)  # (G, 1, R*C)
    opt = _Optim(probe.optim, [w, b])
    best_w, best_b = w.clone(), b.clone()
    best = np.full((n_groups, n_regs), -1, dtype=np.int64)
    count = np.zeros((n_groups, n_regs), dtype=np.int64)
    stopped = np.zeros((n_groups, n_regs), dtype=bool)
    stop_epoch = np.zeros((n_groups, n_regs), dtype=np.int64)
    ids = np.arange(n_groups)  # original group index of each row of the stacked tensors
    valid_rows = _padded(valid)
    n_valid = np.array([len(v) for v in valid])
    results: list[list[Fit | None]] = [[None] * n_regs for _ in groups]

    def finish(rows: np.ndarray) -> None:
        for j in rows:
            gi = ids[j]
            for r in range(n_regs):
                cols = slice(r * c, (r + 1) * c)
                results[gi][r] = Fit(best_w[j, :, cols].T.clone(), best_b[j, 0, cols].clone(),
                                     float(best[j, r] / n_valid[gi]), int(stop_epoch[j, r]))

    nepoch = 0
    while len(ids) and nepoch <= probe.max_epoch:
        for _ in range(probe.epoch_size):
            order = [train[gi][rngs[gi].permutation(len(train[gi]))] for gi in ids]
            steps = [math.ceil(len(o) / bs) for o in order]
            batches = _padded(order, max(steps) * bs)
            n_steps = np.array(steps)
            for i in range(max(steps)):
                rows = batches[:, i * bs : (i + 1) * bs]
                mask = rows >= 0
                cnt = mask.sum(1, keepdim=True).clamp(min=1).float()  # (G, 1)
                xb = x[rows.clamp(min=0)]  # (G, bs, dim)
                logits = torch.baddbmm(b, xb, w).view(len(ids), bs, n_regs, c)
                grad = torch.softmax(logits, -1)
                onehot = y_hot[rows.clamp(min=0)].unsqueeze(2)
                grad = (grad - onehot) * (mask / cnt).view(len(ids), bs, 1, 1)
                grad = grad.view(len(ids), bs, n_regs * c)
                gw = torch.bmm(xb.transpose(1, 2), grad)
                gb = grad.sum(1, keepdim=True)
                active = None if (n_steps > i).all() else torch.from_numpy(np.nonzero(n_steps > i)[0])
                opt.step([w, b], [gw, gb], wd, active)
        nepoch += probe.epoch_size
        correct = _correct(x, y, w, b, valid_rows, c)
        live = ~stopped
        improved = live & (correct > best)
        best = np.where(improved, correct, best)
        if improved.any():
            keep = torch.from_numpy(np.repeat(improved, c, axis=1)).unsqueeze(1)  # (G, 1, R*C)
            best_w = torch.where(keep, w, best_w)
            best_b = torch.where(keep, b, best_b)
        worse = live & ~improved
        newly = worse & (count >= probe.tenacity)
        count += worse
        stopped |= newly
        stop_epoch[newly] = nepoch
        done = stopped.all(1)
        if done.any():
            finish(np.nonzero(done)[0])
            keep_rows = np.nonzero(~done)[0]
            sel = torch.from_numpy(keep_rows)
            w, b, wd, best_w, best_b = (t[sel].contiguous() for t in (w, b, wd, best_w, best_b))
            opt.select(sel)
            valid_rows = valid_rows[sel]
            best, count, stopped, stop_epoch = (a[keep_rows] for a in (best, count, stopped, stop_epoch))
            ids = ids[keep_rows]
    stop_epoch[~stopped] = nepoch
    finish(np.arange(len(ids)))
    return [[f for f in row if f is not None] for row in results]
