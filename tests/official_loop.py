"""An independent reference of the official training loop (docs/official-code.md §2, §4-§6),
written from the official code's semantics, line by line where it matters, and sharing no code
with ``trainables/arrays`` or ``trainables/objectives``: a Hugging Face ``BertModel``, the SimCSE
MLP pooler, the method's heads, ``transformers.AdamW`` 4.x written out, torch's ``LambdaLR``
linear decay, ``clip_grad_norm_`` at 1.0, torch 1.7's ``zero_grad`` (gradients kept as zeros)
and the interleaving rule (a pair batch when ``step % paired_sample_step == 0``, ``step``
restarting every epoch). Every loss term of every step is recorded (``Trace.terms``), under the
project's names, so a comparison can say which term parts first.

The official code's arithmetic is followed as written, not only its mathematics: cosines by
``nn.CosineSimilarity`` on broadcast rows, every ArcSim entry (the positive included) through
``cos(acos(clamp(c)))``, the collator's threshold bias built as ``where(...) * -99999.99``, the
global-local masks as the ``±10000`` arithmetic of ``in_batch_g2l_loss``, DALR's consistency
module called twice (the BatchNorm statistics move twice), its teachers fed both views (2bs
rows), ``1.0 - alpha`` as the second teacher's weight and the terms summed in the code's order.
The reference runs in the dtype of the student it is given (float32 as the official runs, or
float64 to tell a rule apart from rounding), its inputs cast to it.

Two things are taken as given, not reproduced, since the official ones came from the global RNG
that no re-implementation shares: the loaders' row order, as the project's schedule documents
it (a fresh permutation per pass from ``PCG64(SeedSequence([seed, 0 | 1]))``, the last batch of a
pass short), and the stream ListMLE draws its tie-break permutation from (``listmle``: one
``torch.randperm(bs)`` per caption step, as the official ``ListMLE.forward``). On rows whose
teacher scores are distinct the sort undoes any permutation, so the loss does not depend on the
stream; where they tie and the student's scores do not, it does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
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


# --- losses, from the official model code ----------------------------------------------------
def cos_sim(x, y):
    """``Similarity`` / ``ArcSimilarity``'s cosine: ``nn.CosineSimilarity(dim=-1)`` of
    ``x.unsqueeze(1)`` and ``y.unsqueeze(0)``, a (len(x), len(y)) matrix."""
    return nn.CosineSimilarity(dim=-1)(x.unsqueeze(1), y.unsqueeze(0))


def normalized(x):
    """``x / x.norm(2, dim=-1, keepdim=True)``, as the heads and the teacher features do it."""
    return x / x.norm(2, dim=-1, keepdim=True)


class _Acos(torch.autograd.Function):
    """acos of an already clamped cosine. The official derivative is infinite at |c| = 1 (NaN
    with identical views, §5.2); the project floors 1 - c^2 at 1e-12 (docs/official-code.md "The
    loop"), and so does the reference, since its views are identical (dropout off)."""

    @staticmethod
    def forward(ctx, c):
        ctx.save_for_backward(c)
        return torch.acos(c)

    @staticmethod
    def backward(ctx, g):
        (c,) = ctx.saved_tensors
        return -g / torch.sqrt(torch.clamp(1 - c * c, min=1e-12))


def arc_sim(x, y, tau, m, slabels=None):
    """``ArcSimilarity(tau, m)(x, y, slabels)``, ``calculate_arccos2`` line by line: every entry
    goes through acos and back; off-diagonal entries with theta > m move by m, or by
    (1 - slabels) * m given teacher similarities."""
    c = cos_sim(x, y)
    theta = _Acos.apply(torch.clamp(c, -1, 1))
    labels = torch.arange(c.size(0))
    one_hot = F.one_hot(labels, labels.max().item() + 1)
    selected = torch.where(torch.gt(theta, m), torch.ones_like(one_hot), one_hot) * torch.abs(one_hot - 1)
    if slabels is None:
        final = torch.where(selected.bool(), theta - m, theta)
    else:
        final = torch.where(selected.bool(), theta - (1 - slabels) * m, theta)
    return torch.cos(final) / tau


def ce(logits):
    return nn.CrossEntropyLoss()(logits, torch.arange(logits.size(0)))


def mcse_loss(z1, z2, p1, p2, v, lam, tau=0.05, tau_vl=0.05) -> dict[str, torch.Tensor]:
    """§4.2: text CE, plus lam times the mean of the two views' sentence-to-image CE."""
    loss = ce(cos_sim(z1, z2) / tau)
    if v is None:
        return {"text": loss, "total": loss}
    inter = (ce(cos_sim(p1, v) / tau_vl) + ce(cos_sim(p2, v) / tau_vl)) / 2
    return {"text": loss, "grounding_image": inter, "inter": inter, "total": loss + lam * inter}


def threshold_labels(scores, score_base):
    """KDMCSE's collator: ``where(scores > score_base and i != j, 1, 0) * -99999.99`` (an integer
    tensor times a Python float: the default dtype, float32, as the collator made it)."""
    off = ~torch.eye(scores.size(0), dtype=bool)
    return torch.where(torch.logical_and(scores > score_base, off), 1, 0) * -99999.99


def kdmcse_loss(z1, z2, p1, p2, v, t, img, clip_text, lam, m1=0.15, m2=0.15, tau=0.05,
                tau_vl=0.05, score_base=None) -> dict[str, torch.Tensor]:
    """§5.3-§5.4, ``MCSE.compute_loss`` with the collator's scores: L = l_text + lam (L_v + L_t);
    ``score_base`` set is ``--using_threshhold``: the cv bias on L_v's logits, vc on L_t's."""
    loss = ce(arc_sim(z1, z2, tau, m1))
    if v is None:
        return {"text": loss, "total": loss}
    with torch.no_grad():  # the collator's, from the batch's stored features
        vc_scores = img @ clip_text.t()
        cv_scores = clip_text @ img.t()
        vv_scores = normalized(img) @ normalized(img).t()
        cc_scores = normalized(clip_text) @ normalized(clip_text).t()
    logits = [arc_sim(p, v, tau_vl, m2, vv_scores) for p in (p1, p2)]
    logits_t = [arc_sim(p, t, tau_vl, m2, cc_scores) for p in (p1, p2)]
    if score_base is not None:
        logits = [x + threshold_labels(cv_scores, score_base) for x in logits]
        logits_t = [x + threshold_labels(vc_scores, score_base) for x in logits_t]
    l_v = (ce(logits[0]) + ce(logits[1])) / 2
    l_t = (ce(logits_t[0]) + ce(logits_t[1])) / 2
    inter = l_v + l_t
    return {"text": loss, "grounding_image": l_v, "grounding_text": l_t, "inter": inter,
            "total": loss + lam * inter}


def kl(logits, softlabel, tau=0.45, softlabel_tau=0.5):
    """``MCSE.KLContrastiveSimLoss(logits, softlabel, 0.45, 0.5, "kl")``: row softmaxes,
    ``F.kl_div(..., 'batchmean')`` (§6.3)."""
    sim_targets = F.softmax(softlabel / softlabel_tau, dim=1)
    logit_inputs = F.log_softmax(logits / tau, dim=1)
    return F.kl_div(logit_inputs, sim_targets, reduction="batchmean")


def list_mle(teacher, student, gen, gamma=1.0, eps=1e-7):
    """``ListMLE.forward(teacher, student)`` (§6.3): columns permuted by one randperm (from
    ``gen``), sorted by teacher score descending, the ``== -1`` mask, the row max subtracted,
    sum_k log(sum_{l>=k} e^(s_l - M) + 1e-7) - (s_k - M), mean over rows, times gamma."""
    random_indices = torch.randperm(student.shape[-1], generator=gen)
    y_pred_shuffled = student[:, random_indices]
    y_true_shuffled = teacher[:, random_indices]
    y_true_sorted, indices = y_true_shuffled.sort(descending=True, dim=-1)
    mask = y_true_sorted == -1
    preds = torch.gather(y_pred_shuffled, dim=1, index=indices)
    preds[mask] = float("-inf")
    preds = preds - preds.max(dim=1, keepdim=True).values
    cumsums = torch.cumsum(preds.exp().flip(dims=[1]), dim=1).flip(dims=[1])
    observation_loss = torch.log(cumsums + eps) - preds
    observation_loss[mask] = 0.0
    return gamma * torch.mean(torch.sum(observation_loss, dim=1))


def g2l(local, m, temp, attention_mask):
    """``MCSE.in_batch_g2l_loss(l, m, temp, attention_mask)`` (§6.3): ``local`` (N, K, d), the
    global ``m`` (N, d); positives <l_ik, m_i>/temp, negatives <l_jk', m_i>/temp, the self and
    padding entries pushed to -10000 and padding positives to +10000 by mask arithmetic;
    -log softmax(...)[0] summed over k (padding included) over the real tokens, mean over i."""
    m = m.unsqueeze(1)
    n, n_locals, dim = local.size()
    l_n = local.reshape(-1, dim)
    m_n = m.reshape(-1, dim)
    u_p = torch.matmul(local, m.permute(0, 2, 1)).unsqueeze(2) / temp  # N x K x 1 x 1
    temp_mask = attention_mask.unsqueeze(2).unsqueeze(3)
    u_p = (temp_mask * u_p) + (10000.0 * (1 - temp_mask))
    u_n = torch.mm(m_n, l_n.t()) / temp
    u_n = u_n.reshape(n, 1, n, n_locals).permute(0, 2, 3, 1)  # N x N x K x 1
    n_mask = 1 - torch.eye(n)[:, :, None, None]
    u_n = (n_mask * u_n) - (10000.0 * (1 - n_mask))
    temp_mask = attention_mask.unsqueeze(0).unsqueeze(3).expand(n, -1, -1, -1)
    u_n = (temp_mask * u_n) - (10000.0 * (1 - temp_mask))
    u_n = u_n.reshape(n, n * n_locals, 1).unsqueeze(dim=1).expand(-1, n_locals, -1, -1)
    pred_log = F.log_softmax(torch.cat([u_p, u_n], dim=2), dim=2)
    return (torch.sum(-pred_log[:, :, 0].squeeze(), dim=1) / torch.sum(attention_mask, dim=1)).mean()


DALR_TERMS = ("consistency", "cma", "info", "ima", "rank", "g2l")
"""the DALR terms an ablation cell can drop (the project's names)"""


def dalr_compute_loss(student, teachers, alpha, ids, mask, img, clip_text, gen, *,
                      drop: Collection[str] = (), m1=0.18, m2=0.18, temp=0.05, temp_vl=0.05,
                      tau2=0.05, gamma=1.0) -> dict[str, torch.Tensor]:
    """``model_modified.py::MCSE.compute_loss`` (§6.2-§6.3) with ``train_mix.py``'s total,
    ``L_cl + 0.1 * cross + 0.2 * intra`` on a caption batch (``img`` given), ``L_cl`` on a text
    batch. ``drop``: terms an ablation cell leaves out of its sum (they are still computed, as
    the code computes everything: the consistency module's BatchNorm statistics still move)."""
    bs = ids.size(0)
    # the collator repeats each sentence: (bs, 2, len); the encoder sees (2bs, len)
    ids2, mask2 = ids.unsqueeze(1).repeat(1, 2, 1), mask.unsqueeze(1).repeat(1, 2, 1)
    l_pool, l_proj = student(ids2, mask2)
    hidden_size = l_proj.size(-1)
    z1, z2 = l_proj[:, 0], l_proj[:, 1]
    cos_sim_zz = arc_sim(z1, z2, temp, m1)
    loss = ce(cos_sim_zz)
    if img is None:
        return {"text": loss, "total": loss}

    # consistency: the module on the matched and on the rolled images (prepare_data)
    matched_image, unmatched_image = img.clone(), img.clone().roll(shifts=5, dims=0)
    text_aligned_match, image_aligned_match = student.consistency(z1, matched_image)
    text_aligned_unmatch, image_aligned_unmatch = student.consistency(z1, unmatched_image)
    similarity_label = torch.cat([torch.ones(bs), -1 * torch.ones(bs)], dim=0)
    loss_consistency = nn.CosineEmbeddingLoss(margin=0.2)(
        torch.cat([text_aligned_match, text_aligned_unmatch], dim=0),
        torch.cat([image_aligned_match, image_aligned_unmatch], dim=0), similarity_label)

    with torch.no_grad():  # the teachers see both views: (2bs, len)
        flat_ids, flat_mask = ids2.view(-1, ids2.size(-1)), mask2.view(-1, mask2.size(-1))
        (t1, t1_local), (t2, t2_local) = (t.encode(flat_ids, flat_mask) for t in teachers)
        t1, t2 = t1.view(bs, 2, -1), t2.view(bs, 2, -1)
        first_z1, first_z2, second_z1, second_z2 = t1[:, 0], t1[:, 1], t2[:, 0], t2[:, 1]
        teacher_top1_sim_pred = (alpha * (cos_sim(first_z1, first_z2) / tau2)
                                 + (1.0 - alpha) * (cos_sim(second_z1, second_z2) / tau2))
        teacher_text_features = alpha * first_z1 + (1.0 - alpha) * second_z1
        embeddings_local = alpha * t1_local + (1.0 - alpha) * t2_local

    student_top1_sim_pred = cos_sim_zz.clone()
    embeddings_local = embeddings_local.view(bs, 2, -1, hidden_size)
    local1, local2 = embeddings_local[:, 0], embeddings_local[:, 1]
    local1 = local1 / local1.norm(dim=1, keepdim=True)  # the token axis (the code's quirk)
    local2 = local2 / local2.norm(dim=1, keepdim=True)
    mask_1, mask_2 = mask2[:, 0], mask2[:, 1]
    loss_g2l = (g2l(local1, z1, temp, mask_1[:, 1:]) + g2l(local2, z1, temp, mask_2[:, 1:])) / 2
    rank = list_mle(teacher_top1_sim_pred, student_top1_sim_pred, gen, gamma)

    vis_feats_t = img / img.norm(2, dim=-1, keepdim=True)
    text_feats_t = teacher_text_features / teacher_text_features.norm(2, dim=-1, keepdim=True)
    logits_per_image = vis_feats_t @ vis_feats_t.t()
    logits_per_text = text_feats_t @ text_feats_t.t()
    cos_sim_text_image = arc_sim(z1, vis_feats_t, temp, m1)
    cma = kl(cos_sim_text_image.t(), logits_per_image)
    cma = cma + kl(cos_sim_text_image, logits_per_text)
    cma = cma / 2.0

    z1_z2_cos = arc_sim(z1, z2, temp, m1)
    v = normalized(student.image_head(img))  # visn_model's tmlp(clip_text) is discarded
    p = normalized(student.grounding(l_pool))
    p1, p2 = p[:, 0], p[:, 1]
    info = (ce(arc_sim(p1, v, temp_vl, m2, logits_per_image))
            + ce(arc_sim(p2, v, temp_vl, m2, logits_per_image))) / 2
    ima = kl(z1_z2_cos, logits_per_text)

    terms = {"consistency": loss_consistency, "cma": cma, "info": info, "ima": ima, "rank": rank,
             "g2l": loss_g2l}

    def add(*named):  # the code's sums, left to right, less the terms the cell drops
        xs = [x for name, x in named if name not in drop]
        out = xs[0] if xs else loss.new_zeros(())
        for x in xs[1:]:
            out = out + x
        return out

    cross = add(("consistency", 0.01 * loss_consistency), ("cma", cma), ("info", info))
    rank_loss = add(("rank", rank), ("g2l", loss_g2l))  # rank_loss += loss_g2l
    intra = add(("ima", ima), ("", rank_loss))
    total = loss + 0.1 * cross + 0.2 * intra
    return {"text": loss, **{k: v for k, v in terms.items() if k not in drop}, "cross": cross,
            "intra": intra, "total": total}


# --- model ---------------------------------------------------------------------------------
def tanh_head(d_in, d_out):
    return nn.Sequential(nn.Linear(d_in, d_out), nn.Tanh())


def aligner(d_in, shared=None, d_out=256):
    """DALR's ``text_aligner`` / ``image_aligner``: Linear-BN-ReLU-Linear(., 256)-BN-ReLU (§6.1)."""
    shared = shared or d_in
    return nn.Sequential(nn.Linear(d_in, shared), nn.BatchNorm1d(shared), nn.ReLU(),
                         nn.Linear(shared, d_out), nn.BatchNorm1d(d_out), nn.ReLU())


class RefStudent(nn.Module):
    """BertForCL and the heads: a BertModel, the MLP pooler on [CLS] (z), the grounding head on
    [CLS] (l_pool), the image head (``visn_model.vmlp``), the CLIP-text head (``tmlp``) and
    DALR's consistency aligners (its ``sim_classifier``, whose output enters no loss and so never
    gets a gradient, is left out)."""

    def __init__(self, bert, hidden, proj, image_dim, clip_dim=None, aligners=False):
        super().__init__()
        self.bert = bert
        self.mlp = tanh_head(hidden, hidden)
        self.grounding = tanh_head(hidden, proj)
        self.image_head = tanh_head(image_dim, proj)
        self.clip_text_head = tanh_head(clip_dim, proj) if clip_dim else None
        self.text_aligner = aligner(hidden) if aligners else None
        self.image_aligner = aligner(image_dim, hidden) if aligners else None

    def forward(self, ids2, mask2):
        """``MCSE.forward``: (bs, 2, len) ids -> l_pool, l_proj, each (bs, 2, hidden)."""
        bs, num_sent = ids2.size(0), ids2.size(1)
        out = self.bert(input_ids=ids2.view(-1, ids2.size(-1)),
                        attention_mask=mask2.view(-1, mask2.size(-1))).last_hidden_state
        l_pool = out[:, 0].view(bs, num_sent, -1)
        return l_pool, self.mlp(out[:, 0]).view(bs, num_sent, -1)

    def consistency(self, text, image):
        """``ConsistencySimilarityModule.forward``, less the sim_classifier."""
        return self.text_aligner(text), self.image_aligner(image)


class RefTeacher:
    """DALR's frozen text teacher (§6.1): a Hugging Face ``BertModel`` in eval mode under no_grad,
    fed the student's ids; emb = [CLS] (``cls_before_pooler``), local = every other token."""

    def __init__(self, bert):
        self.bert = bert.eval().requires_grad_(False)

    @torch.no_grad()
    def encode(self, ids, mask):
        h = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        return h[:, 0], h[:, 1:]


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
    terms: list[dict[str, float]] = field(default_factory=list)
    """every step's terms, under the project's names (``trainables.objectives.compute_objective``)"""


def train(student: RefStudent, method: str, texts: list[str], captions: list[str], image: np.ndarray,
          clip_text: np.ndarray, tokenize: Callable, *, lr: float, bs: int, epochs: int, seed: int,
          lam: float, max_norm: float = 1.0, teachers: Sequence[tuple[RefTeacher, float]] = (),
          listmle: torch.Generator | None = None, score_base: float | None = None,
          drop: Collection[str] = (), margins: tuple[float, float] | None = None,
          on_step: Callable[[int, RefStudent], None] | None = None) -> Trace:
    """``train_mix.py``'s loop: ``model.train()``, the step's loss, backward, clip, AdamW step,
    ``LambdaLR(1 - step / total)`` (no warmup), zero_grad. ``listmle``: ListMLE's tie-break
    stream (default: one seeded from ``seed``); ``score_base``: KDMCSE's threshold filter on;
    ``drop``: the DALR terms an ablation cell leaves out; ``margins``: (m1, m2) instead of the
    method's defaults; ``on_step(step, student)`` after every update."""
    text_batches, pair_batches = math.ceil(len(texts) / bs), math.ceil(len(captions) / bs)
    paired_sample_step = text_batches // pair_batches
    steps_per_epoch = text_batches + pair_batches
    total = epochs * steps_per_epoch
    dtype = next(student.parameters()).dtype
    params = [p for p in student.parameters() if p.requires_grad]
    opt = HFAdamW(params, lr=lr, eps=1e-6, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (total - s) / total))
    text_loader, pair_loader = Loader(len(texts), bs, seed, 0), Loader(len(captions), bs, seed, 1)
    listmle = listmle if listmle is not None else torch.Generator().manual_seed(seed)
    trace = Trace()
    done = 0
    for _epoch in range(epochs):
        for step in range(steps_per_epoch):
            student.train()
            pair = step % paired_sample_step == 0
            if pair:
                idx = pair_loader.next()
                ids, mask = tokenize([captions[i] for i in idx])
                img = torch.from_numpy(image[idx]).to(dtype)
                ct = torch.from_numpy(clip_text[idx]).to(dtype)
            else:
                idx = text_loader.next()
                ids, mask = tokenize([texts[i] for i in idx])
                img = ct = None
            if method == "dalr":
                extra = {} if margins is None else {"m1": margins[0], "m2": margins[1]}
                # the second teacher's weight is 1.0 - alpha, as the code writes it
                terms = dalr_compute_loss(student, [t for t, _ in teachers], teachers[0][1], ids,
                                          mask, img, ct, listmle, drop=drop, **extra)
            else:
                l_pool, l_proj = student(ids.unsqueeze(1).repeat(1, 2, 1),
                                         mask.unsqueeze(1).repeat(1, 2, 1))
                z1, z2 = l_proj[:, 0], l_proj[:, 1]
                p = normalized(student.grounding(l_pool)) if pair else None
                p1, p2 = (p[:, 0], p[:, 1]) if pair else (None, None)
                v = normalized(student.image_head(img)) if pair else None
                if method == "mcse":
                    terms = mcse_loss(z1, z2, p1, p2, v, lam)
                else:
                    t = normalized(student.clip_text_head(ct)) if pair else None
                    extra = {} if margins is None else {"m1": margins[0], "m2": margins[1]}
                    terms = kdmcse_loss(z1, z2, p1, p2, v, t, img, ct, lam, score_base=score_base,
                                        **extra)
            loss = terms["total"]
            loss.backward()
            trace.grad_norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))
            opt.step()
            sched.step()
            zero_grad_torch17(params)
            trace.losses.append(float(loss.detach()))
            trace.terms.append({k: float(v.detach()) for k, v in terms.items()})
            trace.kinds.append("pair" if pair else "text")
            done += 1
            if on_step is not None:
                on_step(done, student)
    return trace
