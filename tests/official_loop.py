"""An independent reference of the official training loop (docs/official-code.md §2, §4-§6),
written from the doc and sharing no code with ``trainables/arrays`` or ``trainables/objectives``:
a Hugging Face ``BertModel``, the SimCSE MLP pooler, the method's heads, ``transformers.AdamW``
4.x written out, torch's ``LambdaLR`` linear decay, ``clip_grad_norm_`` at 1.0, torch 1.7's
``zero_grad`` (gradients kept as zeros) and the interleaving rule (a pair batch when
``step % paired_sample_step == 0``, ``step`` restarting every epoch).

The loaders are as the project's schedule documents them (a fresh permutation per pass from
``PCG64(SeedSequence([seed, 0 | 1]))``, the last batch of a pass short): the order of the rows is
the one thing the reference takes as given, since the official order came from an unseeded
``DataLoader`` shuffle that no re-implementation reproduces.

DALR's ListMLE permutes the columns with ``torch.randperm`` before its sort (a tie-break, §6.3).
The reference draws it from a generator of its own: on rows whose teacher scores are distinct the
sort undoes any permutation, so the loss does not depend on the stream (the test's captions are
distinct; equal captions would tie and make the term depend on it).
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


def kl(student_logits, teacher_logits):
    """``KLContrastiveSimLoss``: F.kl_div(log softmax(student / 0.45), softmax(teacher / 0.5),
    'batchmean'), row softmaxes (§6.3)."""
    return F.kl_div(F.log_softmax(student_logits / 0.45, dim=1),
                    F.softmax(teacher_logits / 0.5, dim=1), reduction="batchmean")


def list_mle(student, teacher, gen, eps=1e-7):
    """``ListMLE`` (§6.3): the whole row, columns permuted by one randperm, sorted by teacher score
    descending; sum_k log(sum_{l>=k} e^(s_l - M) + 1e-7) - (s_k - M), mean over rows."""
    perm = torch.randperm(student.shape[1], generator=gen)
    s, t = student[:, perm], teacher[:, perm]
    order = t.argsort(dim=1, descending=True)
    ranked = torch.gather(s, 1, order)
    ranked = ranked - ranked.max(dim=1, keepdim=True).values
    losses = []
    for k in range(ranked.shape[1]):
        losses.append(torch.log(ranked[:, k:].exp().sum(dim=1) + eps) - ranked[:, k])
    return torch.stack(losses, dim=1).sum(dim=1).mean()


def g2l(local, z, mask, tau=0.05):
    """``in_batch_g2l_loss`` (§6.3): ``local`` (bs, K, d) normalised over the token axis (padding
    included); for each real token k of sentence i, -log softmax([pos, negatives])[0] with
    pos = <l_ik, z_i>/tau and negatives <l_jk', z_i>/tau over j != i and real k' (others -10000,
    padding positives +10000); sum over k / real tokens, mean over sentences."""
    n, k, _ = local.shape
    loc = local / local.norm(dim=1, keepdim=True)
    real = mask.bool()
    rows = []
    for i in range(n):
        pos = (loc[i] @ z[i]) / tau  # (K,)
        pos = torch.where(real[i], pos, torch.full_like(pos, 10000.0))
        neg = (loc @ z[i]) / tau  # (n, K)
        keep = real.clone()
        keep[i] = False
        neg = torch.where(keep, neg, torch.full_like(neg, -10000.0)).reshape(-1)
        logits = torch.cat([pos[:, None], neg[None, :].expand(k, -1)], dim=1)
        loss_k = -F.log_softmax(logits, dim=1)[:, 0]
        rows.append(loss_k.sum() / real[i].sum())
    return torch.stack(rows).mean()


def dalr_loss(z1, z2, p1, p2, v, img, teacher_embs, teacher_locals, weights, mask,
              text_aligned, image_aligned, image_aligned_rolled, gen, m1=0.18, m2=0.18, tau=0.05,
              tau_vl=0.05, tau2=0.05):
    """§6.2-§6.3, the HEAD weights: L = L_cl + 0.1 (0.01 L_cons + L_CMA + L_cross)
    + 0.2 (L_IMA + L_rank + L_g2l) on a pair batch, L_cl on a text batch."""
    s_zz = arc_sim(z1, z2, tau, m1)
    loss = ce(s_zz)
    if v is None:
        return loss
    with torch.no_grad():
        s_t = sum(w * cos_matrix(e, e) / tau2 for w, e in zip(weights, teacher_embs, strict=True))
        f_t = sum(w * e for w, e in zip(weights, teacher_embs, strict=True))
        local_t = sum(w * e for w, e in zip(weights, teacher_locals, strict=True))
        v_hat = F.normalize(img, dim=-1)
    bs = z1.shape[0]
    cons = nn.CosineEmbeddingLoss(margin=0.2)(
        torch.cat([text_aligned, text_aligned]), torch.cat([image_aligned, image_aligned_rolled]),
        torch.cat([torch.ones(bs), -torch.ones(bs)]))
    s = arc_sim(z1, v_hat, tau, m1)
    cma = 0.5 * (kl(s.t(), cos_matrix(v_hat, v_hat)) + kl(s, cos_matrix(f_t, f_t)))
    s_img = cos_matrix(img, img)
    cross_info = 0.5 * (ce(arc_sim(p1, v, tau_vl, m2, s_img)) + ce(arc_sim(p2, v, tau_vl, m2, s_img)))
    ima = kl(s_zz, cos_matrix(f_t, f_t))
    rank = 1.0 * list_mle(s_zz, s_t, gen)
    local_loss = 0.5 * (g2l(local_t, z1, mask[:, 1:]) + g2l(local_t, z1, mask[:, 1:]))
    cross = 0.01 * cons + cma + cross_info
    intra = ima + rank + local_loss
    return loss + 0.1 * cross + 0.2 * intra


# --- model ---------------------------------------------------------------------------------
def tanh_head(d_in, d_out):
    return nn.Sequential(nn.Linear(d_in, d_out), nn.Tanh())


def aligner(d_in, shared=None, d_out=256):
    """DALR's ``text_aligner`` / ``image_aligner``: Linear-BN-ReLU-Linear(., 256)-BN-ReLU (§6.1)."""
    shared = shared or d_in
    return nn.Sequential(nn.Linear(d_in, shared), nn.BatchNorm1d(shared), nn.ReLU(),
                         nn.Linear(shared, d_out), nn.BatchNorm1d(d_out), nn.ReLU())


class RefStudent(nn.Module):
    """BertForCL: a BertModel, the MLP pooler on [CLS] (z), grounding heads on [CLS] (l_pool)."""

    def __init__(self, bert, hidden, proj, image_dim, clip_dim=None, aligners=False):
        super().__init__()
        self.bert = bert
        self.mlp = tanh_head(hidden, hidden)
        self.grounding = tanh_head(hidden, proj)
        self.image_head = tanh_head(image_dim, proj)
        self.clip_text_head = tanh_head(clip_dim, proj) if clip_dim else None
        # DALR's consistency module (its unused sim_classifier never gets a gradient: left out)
        self.text_aligner = aligner(hidden) if aligners else None
        self.image_aligner = aligner(image_dim, hidden) if aligners else None

    def forward(self, ids, mask):
        bs = ids.shape[0]
        ids2 = ids.unsqueeze(1).repeat(1, 2, 1).view(2 * bs, -1)  # each sentence fed twice
        mask2 = mask.unsqueeze(1).repeat(1, 2, 1).view(2 * bs, -1)
        cls = self.bert(input_ids=ids2, attention_mask=mask2).last_hidden_state[:, 0].view(bs, 2, -1)
        z = self.mlp(cls)
        p = F.normalize(self.grounding(cls), dim=-1)
        return z[:, 0], z[:, 1], p[:, 0], p[:, 1]


class RefTeacher:
    """DALR's frozen text teacher (§6.1): a Hugging Face ``BertModel`` in eval mode under no_grad,
    fed the student's ids; emb = [CLS] (``cls_before_pooler``), local = every other token."""

    def __init__(self, bert):
        self.bert = bert.eval().requires_grad_(False)

    @torch.no_grad()
    def encode(self, ids, mask):
        h = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        return h[:, 0], h[:, 1:]


def dalr_step_loss(student, teachers, ids, mask, z1, z2, p1, p2, v, img, gen):
    if v is None:
        return dalr_loss(z1, z2, p1, p2, None, None, (), (), (), mask, None, None, None, gen)
    # the official loop feeds the teachers both views' ids (2bs rows, §6.1); they are
    # deterministic, so view 2 repeats view 1 and one pass is enough
    embs, locals_ = zip(*(t.encode(ids, mask) for t, _ in teachers), strict=True)
    # ConsistencySimilarityModule is called on the matched and on the rolled images, both in
    # train mode (the BatchNorm running statistics move twice a caption step)
    ta, ia = student.text_aligner(z1), student.image_aligner(img)
    _, ia_rolled = student.text_aligner(z1), student.image_aligner(img.roll(5, 0))
    return dalr_loss(z1, z2, p1, p2, v, img, embs, locals_, [w for _, w in teachers], mask,
                     ta, ia, ia_rolled, gen)


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
          lam: float, max_norm: float = 1.0,
          teachers: Sequence[tuple[RefTeacher, float]] = ()) -> Trace:
    """``train_mix.py``'s loop: LambdaLR(1 - step / total), no warmup; clip; step; zero_grad."""
    text_batches, pair_batches = math.ceil(len(texts) / bs), math.ceil(len(captions) / bs)
    paired_sample_step = text_batches // pair_batches
    steps_per_epoch = text_batches + pair_batches
    total = epochs * steps_per_epoch
    params = [p for p in student.parameters() if p.requires_grad]
    opt = HFAdamW(params, lr=lr, eps=1e-6, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (total - s) / total))
    text_loader, pair_loader = Loader(len(texts), bs, seed, 0), Loader(len(captions), bs, seed, 1)
    listmle = torch.Generator().manual_seed(seed)  # any stream: see the module docstring
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
            elif method == "dalr":
                loss = dalr_step_loss(student, teachers, ids, mask, z1, z2, p1, p2, v, img, listmle)
            else:
                t = F.normalize(student.clip_text_head(ct), dim=-1) if pair else None
                loss = kdmcse_loss(z1, z2, p1, p2, v, t, img, ct, lam)
            loss.backward()
            trace.grad_norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))
            opt.step()
            sched.step()
            zero_grad_torch17(params)
            trace.losses.append(float(loss.detach()))
            trace.kinds.append("pair" if pair else "text")
    return trace
