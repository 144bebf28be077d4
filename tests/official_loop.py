"""An independent reference of the official training loop (docs/official-code.md §2, §4, §5),
written from the doc and sharing no code with ``trainables/arrays`` or ``trainables/objectives``:
a Hugging Face ``BertModel``, the SimCSE MLP pooler, the method's heads, ``transformers.AdamW``
4.x written out, torch's ``LambdaLR`` linear decay, ``clip_grad_norm_`` at 1.0, torch 1.7's
``zero_grad`` (gradients kept as zeros) and the interleaving rule (a pair batch when
``step % paired_sample_step == 0``, ``step`` restarting every epoch).

The loaders are as the project's schedule documents them (a fresh permutation per pass from
``PCG64(SeedSequence([seed, 0 | 1]))``, the last batch of a pass short): the order of the rows is
the one thing the reference takes as given, since the official order came from an unseeded
``DataLoader`` shuffle that no re-implementation reproduces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

BETAS = (0.9, 0.999)


class HFAdamW(torch.optim.Optimizer):
    """transformers.AdamW (4.8.2) ``step``, as released."""

    def __init__(self, params, lr, eps=1e-6, weight_decay=0.0):
        super().__init__(params, {"lr": lr, "betas": BETAS, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                beta1, beta2 = group["betas"]
                state["step"] += 1
                exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
                denom = exp_avg_sq.sqrt().add_(group["eps"])
                step_size = group["lr"] * math.sqrt(1.0 - beta2 ** state["step"]) / (1.0 - beta1 ** state["step"])
                p.addcdiv_(exp_avg, denom, value=-step_size)
                if group["weight_decay"] > 0.0:
                    p.add_(p, alpha=-group["lr"] * group["weight_decay"])


def zero_grad_torch17(params: Sequence[torch.Tensor]) -> None:
    """``Optimizer.zero_grad()`` of torch 1.7: a gradient once made stays, as zeros."""
    for p in params:
        if p.grad is not None:
            p.grad.detach_()
            p.grad.zero_()


# --- losses, from docs/official-code.md ----------------------------------------------------
def cos_matrix(x, y):
    return F.normalize(x, dim=-1, eps=1e-8) @ F.normalize(y, dim=-1, eps=1e-8).t()


class _Acos(torch.autograd.Function):
    """acos(clamp(c, -1, 1)). The official derivative is infinite at |c| = 1 (NaN with identical
    views, §5.2); the project floors 1 - c^2 at 1e-12 (docs/official-code.md "The loop"), and so
    does the reference, since its views are identical (dropout off)."""

    @staticmethod
    def forward(ctx, c):
        ctx.save_for_backward(c)
        return torch.acos(c.clamp(-1, 1))

    @staticmethod
    def backward(ctx, g):
        (c,) = ctx.saved_tensors
        d = -1.0 / torch.sqrt(torch.clamp(1 - c * c, min=1e-12))
        return torch.where(c.abs() <= 1, g * d, torch.zeros_like(g))


def arc_sim(x, y, tau, m, s=None):
    """``ArcSimilarity.calculate_arccos2`` (§5.2): off-diagonal entries with theta > m move by
    m * (1 - s) (s = 0 without teacher), logits cos(theta') / tau."""
    c = cos_matrix(x, y)
    theta = _Acos.apply(c)
    delta = torch.ones_like(c) if s is None else 1 - s
    moved = (theta > m) & ~torch.eye(c.shape[0], dtype=torch.bool)
    theta2 = torch.where(moved, theta - m * delta, theta)
    return torch.cos(theta2) / tau


def ce(logits):
    return F.cross_entropy(logits, torch.arange(logits.shape[0]))


def mcse_loss(z1, z2, p1, p2, v, lam, tau=0.05, tau_vl=0.05):
    """§4.2: text CE, plus lam times the mean of the two views' sentence-to-image CE."""
    loss = ce(cos_matrix(z1, z2) / tau)
    if v is None:
        return loss
    return loss + lam * 0.5 * (ce(cos_matrix(p1, v) / tau_vl) + ce(cos_matrix(p2, v) / tau_vl))


def kdmcse_loss(z1, z2, p1, p2, v, t, img, clip_text, lam, m1=0.15, m2=0.15, tau=0.05, tau_vl=0.05):
    """§5.3 without the threshold (off in the released scripts): L = l_text + lam (L_v + L_t)."""
    loss = ce(arc_sim(z1, z2, tau, m1))
    if v is None:
        return loss
    s_img = cos_matrix(img, img).detach()
    s_txt = cos_matrix(clip_text, clip_text).detach()
    l_v = 0.5 * (ce(arc_sim(p1, v, tau_vl, m2, s_img)) + ce(arc_sim(p2, v, tau_vl, m2, s_img)))
    l_t = 0.5 * (ce(arc_sim(p1, t, tau_vl, m2, s_txt)) + ce(arc_sim(p2, t, tau_vl, m2, s_txt)))
    return loss + lam * (l_v + l_t)


# --- model ---------------------------------------------------------------------------------
def tanh_head(d_in, d_out):
    return nn.Sequential(nn.Linear(d_in, d_out), nn.Tanh())


class RefStudent(nn.Module):
    """BertForCL: a BertModel, the MLP pooler on [CLS] (z), grounding heads on [CLS] (l_pool)."""

    def __init__(self, bert, hidden, proj, image_dim, clip_dim=None):
        super().__init__()
        self.bert = bert
        self.mlp = tanh_head(hidden, hidden)
        self.grounding = tanh_head(hidden, proj)
        self.image_head = tanh_head(image_dim, proj)
        self.clip_text_head = tanh_head(clip_dim, proj) if clip_dim else None

    def forward(self, ids, mask):
        bs = ids.shape[0]
        ids2 = ids.unsqueeze(1).repeat(1, 2, 1).view(2 * bs, -1)  # each sentence fed twice
        mask2 = mask.unsqueeze(1).repeat(1, 2, 1).view(2 * bs, -1)
        cls = self.bert(input_ids=ids2, attention_mask=mask2).last_hidden_state[:, 0].view(bs, 2, -1)
        z = self.mlp(cls)
        p = F.normalize(self.grounding(cls), dim=-1)
        return z[:, 0], z[:, 1], p[:, 0], p[:, 1]


# --- loop ----------------------------------------------------------------------------------
class Loader:
    """Infinite reshuffling batches over range(n), the last batch of a pass short."""

    def __init__(self, n, bs, seed, stream):
        self.n, self.bs = n, bs
        self.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, stream])))
        self.perm, self.pos = self.rng.permutation(n), 0

    def next(self):
        if self.pos >= self.n:
            self.perm, self.pos = self.rng.permutation(self.n), 0
        out = self.perm[self.pos:self.pos + self.bs]
        self.pos += len(out)
        return out


@dataclass
class Trace:
    losses: list[float] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)


def train(student: RefStudent, method: str, texts: list[str], captions: list[str], image: np.ndarray,
          clip_text: np.ndarray, tokenize: Callable, *, lr: float, bs: int, epochs: int, seed: int,
          lam: float, max_norm: float = 1.0) -> Trace:
    """``train_mix.py``'s loop: LambdaLR(1 - step / total), no warmup; clip; step; zero_grad."""
    text_batches, pair_batches = math.ceil(len(texts) / bs), math.ceil(len(captions) / bs)
    paired_sample_step = text_batches // pair_batches
    steps_per_epoch = text_batches + pair_batches
    total = epochs * steps_per_epoch
    params = [p for p in student.parameters() if p.requires_grad]
    opt = HFAdamW(params, lr=lr, eps=1e-6, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (total - s) / total))
    text_loader, pair_loader = Loader(len(texts), bs, seed, 0), Loader(len(captions), bs, seed, 1)
    trace = Trace()
    student.train()
    for _epoch in range(epochs):
        for step in range(steps_per_epoch):
            pair = step % paired_sample_step == 0
            if pair:
                idx = pair_loader.next()
                ids, mask = tokenize([captions[i] for i in idx])
                img = torch.from_numpy(image[idx])
                ct = torch.from_numpy(clip_text[idx])
            else:
                idx = text_loader.next()
                ids, mask = tokenize([texts[i] for i in idx])
                img = ct = None
            z1, z2, p1, p2 = student(ids, mask)
            v = F.normalize(student.image_head(img), dim=-1) if pair else None
            if method == "mcse":
                loss = mcse_loss(z1, z2, p1, p2, v, lam)
            else:
                t = F.normalize(student.clip_text_head(ct), dim=-1) if pair else None
                loss = kdmcse_loss(z1, z2, p1, p2, v, t, img, ct, lam)
            loss.backward()
            trace.grad_norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))
            opt.step()
            sched.step()
            zero_grad_torch17(params)
            trace.losses.append(float(loss))
            trace.kinds.append("pair" if pair else "text")
    return trace
