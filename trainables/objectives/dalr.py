"""DALR (ACL Findings 2025): its loss terms and teacher combinations as pure tensor functions,
and the method that adds them up.

Each function follows ``Hekang001/DALR`` ``model_modified.py::MCSE.compute_loss`` at c53e1fc
(docs/official-code.md §6.2-§6.3), quirks included, with keywords for the DALR paper's reading
where it differs. The method (:class:`DALR`, registered as ``dalr``) totals them:

- code reading (default): total = text + lam * cross + mu * intra,
  cross = consistency_weight * consistency + cma + info, intra = ima + rank + g2l;
- ``paper_reading`` (Eq. 14): total = text + info + lam * (consistency + cma) + mu * (ima + rank):
  L_Info leaves the lam bracket, consistency is unweighted, g2l (code only) is not computed;
  "cross" and "intra" then hold L_CML and L_IML.

A switched-off term is absent from the dict and the total; an empty ``text_teacher_local`` gives
g2l = 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from trainables.objectives.core import (
    PreDrawn,
    adapacse_loss,
    angular_margin_logits,
    at_least_f32,
    diagonal_cross_entropy,
    frozen,
    frozen_cosine,
    is_zero,
    no_autocast,
    row_permutation,
)
from trainables.objectives.grounding import margin_settings
from trainables.objectives.methods import (
    ANGLE,
    Head,
    HeadDims,
    Method,
    Needs,
    Settings,
    StoreView,
    StudentOutputs,
    TeacherInputs,
    need,
    register,
)
from trainables.runtime.checks import (
    NON_NEGATIVE,
    POSITIVE,
    Choice,
    Each,
    Flag,
    Number,
    count,
    setting,
)

G2L_MASK = 10000.0
"""``in_batch_g2l_loss`` constant for excluded entries (padding positives, self/padding negatives)."""
_COS_EMB_EPS = 1e-12
"""``nn.CosineEmbeddingLoss`` adds this to both squared norms."""
ALIGN_DIM = 256
"""DALR consistency module's ``sim_dim``: fixed at 256 in the code, independent of proj_dim."""


def _check_weights(what: str, tensors: Sequence[torch.Tensor], weights: Sequence[float]) -> None:
    if len(tensors) == 0:
        raise ValueError(f"no {what} given; DALR needs one per text teacher")
    if len(tensors) != len(weights):
        raise ValueError(
            f"{len(tensors)} {what} but teacher_weights has {len(weights)} entries; "
            "give one weight per text teacher"
        )


def dalr_teacher_scores(
    teachers: Sequence[torch.Tensor],
    weights: Sequence[float],
    temperature: float = 0.05,
    *,
    view2: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """S_T = sum_k w_k cos(T_k z1, T_k z2) / tau2: weighted sum of scaled similarity matrices.

    ``teachers``: one (bs, d) [CLS] embedding per teacher, view 1; ``view2`` defaults to view 1
    (the teachers are deterministic and see identical tokens, so the code's two views are equal).
    """
    _check_weights("teacher embeddings", teachers, weights)
    view2 = teachers if view2 is None else view2
    _check_weights("view-2 teacher embeddings", view2, weights)
    return sum(
        w * (frozen_cosine(a, b) / temperature)
        for w, a, b in zip(weights, teachers, view2, strict=True)
    )


def dalr_teacher_embedding(
    teachers: Sequence[torch.Tensor], weights: Sequence[float]
) -> torch.Tensor:
    """F_T = sum_k w_k T_k z1: weighted average of the raw teacher embeddings, view 1."""
    _check_weights("teacher embeddings", teachers, weights)
    return sum(w * frozen(t) for w, t in zip(weights, teachers, strict=True))


def dalr_teacher_local(local: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """Local_T = sum_k w_k local_k: weighted token states (bs, L-1, d), [CLS] excluded."""
    _check_weights("teacher token-state tensors", local, weights)
    return sum(w * frozen(t) for w, t in zip(weights, local, strict=True))


def dalr_consistency_loss(
    text_aligned: torch.Tensor,
    image_aligned: torch.Tensor,
    margin: float = 0.2,
    shift: int = 5,
) -> torch.Tensor:
    """L_cons: ``CosineEmbeddingLoss(margin)`` over bs matched and bs mismatched pairs, mean.

    DALR paper Eq. 5. Matched (t_i, v_i): 1 - cos. Mismatched (t_i, v_{(i - shift) mod bs}), the
    code's fixed ``image.roll(5, 0)`` (not a random shuffle; with bs <= shift the "negative" can be
    the matched image): max(0, cos - margin). The aligners are row-wise up to batch-statistics
    BatchNorm, so aligning the rolled images equals rolling the aligned ones.
    """
    if text_aligned.shape != image_aligned.shape:
        raise ValueError(
            f"text_aligned {tuple(text_aligned.shape)} and image_aligned {tuple(image_aligned.shape)} differ"
        )
    t, v = at_least_f32(text_aligned), at_least_f32(image_aligned)

    def cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        sq = ((a * a).sum(-1) + _COS_EMB_EPS) * ((b * b).sum(-1) + _COS_EMB_EPS)
        return (a * b).sum(-1) / sq.sqrt()

    pos = 1.0 - cos(t, v)
    neg = (cos(t, v.roll(shift, 0)) - margin).clamp_min(0.0)
    return torch.cat([pos, neg]).mean()


def kl_distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    student_temperature: float = 0.45,
    teacher_temperature: float = 0.5,
) -> torch.Tensor:
    """KL(softmax(teacher/tau_t) || softmax(student/tau_s)), row softmax, ``batchmean``.

    The code's ``KLContrastiveSimLoss`` = ``F.kl_div(log Q, P, 'batchmean')``
    = sum_ij P_ij (log P_ij - log Q_ij) / bs (DALR paper Eq. 8 and 12 sum over i instead).
    """
    teacher = frozen(teacher_logits)
    dtype = torch.promote_types(student_logits.dtype, teacher.dtype)
    log_q = F.log_softmax(student_logits.to(dtype) / student_temperature, dim=1)
    p = F.softmax(teacher.to(dtype) / teacher_temperature, dim=1)
    # F.kl_div(log_q, p, reduction="batchmean") spelled out, as torch computes it: kl_div has no
    # vmap batching rule, and an array runs this loss for all its DALR members at once.
    return (torch.xlogy(p, p) - p * log_q).sum() / log_q.shape[0]


def dalr_cma_loss(
    z1: torch.Tensor,
    clip_image: torch.Tensor,
    teacher_text: torch.Tensor,
    margin: float = 0.18,
    *,
    temperature: float = 0.05,
    student_temperature: float = 0.45,
    teacher_temperature: float = 0.5,
) -> torch.Tensor:
    """L_CMA = 1/2 [KL(VV^T/0.5 || S^T/0.45) + KL(TT^T/0.5 || S/0.45)] (DALR paper Eq. 6-8).

    S = ArcSim(z1, clip_image; tau, margin): the student MLP output against the normalised raw
    image feature with no projection, fixed margin on off-diagonal negatives. V, T are the
    normalised image features and F_T (``teacher_text``). Image rows use the transposed matrix.
    """
    if z1.shape[1] != clip_image.shape[1]:
        raise ValueError(
            f"DALR's CMA compares the student embedding (dim {z1.shape[1]}) directly with the image "
            f"feature (dim {clip_image.shape[1]}); with this feature (e.g. ResNet) set use_cma=False"
        )
    s = angular_margin_logits(z1, clip_image.detach().to(z1.dtype), temperature, margin)
    image_side = kl_distillation_loss(
        s.t(), frozen_cosine(clip_image, clip_image), student_temperature, teacher_temperature
    )
    text_side = kl_distillation_loss(
        s, frozen_cosine(teacher_text, teacher_text), student_temperature, teacher_temperature
    )
    return (image_side + text_side) / 2


def dalr_ima_loss(
    z1: torch.Tensor,
    z2: torch.Tensor,
    teacher_text: torch.Tensor,
    margin: float = 0.18,
    *,
    temperature: float = 0.05,
    student_temperature: float = 0.45,
    teacher_temperature: float = 0.5,
) -> torch.Tensor:
    """L_IMA = KL(softmax(TT^T/0.5) || softmax(S_zz/0.45)) (DALR paper Eq. 11-12).

    S_zz = ArcSim(z1, z2; tau, margin) is the text loss's matrix; T = F_T normalised.
    """
    s = angular_margin_logits(z1, z2, temperature, margin)
    return kl_distillation_loss(
        s, frozen_cosine(teacher_text, teacher_text), student_temperature, teacher_temperature
    )


def listmle_loss(
    student_scores: torch.Tensor,
    teacher_scores: torch.Tensor,
    eps: float = 1e-7,
    *,
    generator: torch.Generator | PreDrawn | None = None,
) -> torch.Tensor:
    """ListMLE of each student row in the teacher's order (DALR paper Eq. 10; code ``ListMLE``).

    The list is the whole row, positive included. Columns are first permuted by one
    ``torch.randperm`` (random tie-break; ``generator`` makes it deterministic, default the global
    CPU RNG as in the code), then sorted by teacher score, descending. With M the row maximum:
    loss_i = sum_k [log(sum_{l >= k} exp(s_l - M) + eps) - (s_k - M)], mean over rows.
    The eps = 1e-7 inside the log is not negligible: it floors tail terms at log 1e-7.
    The code's ``teacher == -1`` padding mask is left out (never triggers on cos/0.05 scores).
    """
    if student_scores.shape != teacher_scores.shape:
        raise ValueError(
            f"student {tuple(student_scores.shape)} and teacher {tuple(teacher_scores.shape)} scores differ"
        )
    perm = row_permutation(student_scores.shape[-1], generator, student_scores.device)
    s, t = student_scores[:, perm], frozen(teacher_scores)[:, perm]
    _, order = t.sort(descending=True, dim=-1)
    ranked = s.gather(1, order)
    ranked = ranked - ranked.max(dim=1, keepdim=True).values
    tail = ranked.exp().flip(dims=[1]).cumsum(dim=1).flip(dims=[1])
    return (torch.log(tail + eps) - ranked).sum(dim=1).mean()


def dalr_global_local_loss(
    local_tokens: torch.Tensor,
    global_embedding: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    temperature: float = 0.05,
    normalize: str = "tokens",
) -> torch.Tensor:
    """DALR's global-local token InfoNCE (``in_batch_g2l_loss``; code only, not in the paper).

    ``local_tokens`` (bs, K, d): Local_T without [CLS]; ``attention_mask`` (bs, K): the student
    mask without [CLS]; ``global_embedding`` (bs, d): z1, not normalised. ``normalize="tokens"``
    divides by the norm over the token axis (dim 1, padding included), the code's quirk;
    ``"features"`` normalises each token vector. For each token k of sentence i:
    pos = <l_ik, z_i>/tau, negatives <l_jk', z_i>/tau over j != i and real k' of j (others -10000),
    loss_ik = -log softmax([pos, negatives])[0]; padding positives are +10000 (loss ~ 0).
    Sentence loss = sum_k loss_ik / (real tokens), mean over sentences. The code averages two
    identical calls (view-1 and view-2 tokens are equal, z1 both times): one call is the same.
    """
    if normalize not in ("tokens", "features"):
        raise ValueError(f"normalize={normalize!r}; use 'tokens' or 'features'")
    n, k, d = local_tokens.shape
    if global_embedding.shape != (n, d):
        raise ValueError(
            f"global embedding {tuple(global_embedding.shape)} does not match local tokens {tuple(local_tokens.shape)}"
        )
    if attention_mask.shape != (n, k):
        raise ValueError(
            f"attention mask {tuple(attention_mask.shape)} does not match local tokens (bs, K) = ({n}, {k})"
        )
    with no_autocast(global_embedding):
        g = at_least_f32(global_embedding)
        loc = frozen(local_tokens).to(g.dtype)
        loc = loc / loc.norm(dim=1 if normalize == "tokens" else 2, keepdim=True).clamp_min(1e-30)
        real = attention_mask.to(device=g.device, dtype=torch.bool)
        pos = torch.einsum("ikd,id->ik", loc, g) / temperature
        pos = torch.where(real, pos, torch.full_like(pos, G2L_MASK))
        neg = torch.einsum("jkd,id->ijk", loc, g) / temperature
        keep = ~torch.eye(n, dtype=torch.bool, device=g.device)[:, :, None] & real[None]
        neg = torch.where(keep, neg, torch.full_like(neg, -G2L_MASK))
        # log softmax([pos, negatives])[0]; the negatives' log-sum-exp is shared by all k of row i.
        lse_neg = torch.logsumexp(neg.reshape(n, n * k), dim=1, keepdim=True)
        loss = torch.logaddexp(pos, lse_neg) - pos
        return (loss.sum(dim=1) / real.sum(dim=1).to(loss.dtype)).mean()


# ------------------------------------------------------------------------------ the method
@dataclass(frozen=True)
class DALRSettings(Settings):
    """DALR: the official scripts' values (docs/official-code.md §6.5)."""

    temperature: float = setting(0.05, POSITIVE)
    """tau of the text-text InfoNCE and of the student matrices (0.05)"""
    temperature_vl: float = setting(0.05, POSITIVE)
    """tau' of L_Info (0.05)"""
    lam: float = setting(0.1, NON_NEGATIVE)
    """lambda: weight of the cross-modal part 'cross' (0.1)"""
    mu: float = setting(0.2, NON_NEGATIVE)
    """mu: weight of the intra-modal part 'intra' (0.2)"""
    text_margin: float = setting(0.18, ANGLE)
    """m1: fixed angular margin on text-text negatives (0.18)"""
    grounding_margin: float = setting(0.18, ANGLE)
    """m2: AdapACSE margin of L_Info (0.18; 0 = plain InfoNCE)"""
    adaptive_margin: bool = setting(True, Flag())
    """AdapACSE in L_Info; off = plain InfoNCE"""
    use_info: bool = setting(True, Flag())
    """L_Info (code: AdapACSE image grounding, 'L_cross')"""
    use_consistency: bool = setting(True, Flag())
    """L_cons"""
    use_cma: bool = setting(True, Flag())
    """L_CMA"""
    use_ima: bool = setting(True, Flag())
    """L_IMA"""
    use_rank: bool = setting(True, Flag())
    """L_rank (ListMLE)"""
    use_g2l: bool = setting(True, Flag())
    """global-local token InfoNCE (code only, not in the paper)"""
    consistency_weight: float = setting(0.01, NON_NEGATIVE)
    consistency_margin: float = setting(0.2, Number(-1, 1, hint="a cosine margin"))
    consistency_shift: int = setting(5, count(1, "images rolled by this many rows"))
    kl_student_temperature: float = setting(0.45, POSITIVE)
    kl_teacher_temperature: float = setting(0.5, POSITIVE)
    teacher_weights: tuple[float, ...] = setting((0.33, 0.67), Each(NON_NEGATIVE))
    """weights of the text teachers (SimCSE 0.33, DiffCSE 0.67), one per ``text_teachers``"""
    teacher_temperature: float = setting(0.05, POSITIVE)
    rank_eps: float = setting(1e-7, POSITIVE)
    paper_reading: bool = setting(False, Flag())
    """True: Eq. 14 as printed (module docstring)"""
    rank_gamma: float = setting(1.0, NON_NEGATIVE)
    """gamma: ListMLE weight inside 'rank' (DALR scripts: 1.0)"""
    g2l_normalize: str = setting("tokens", Choice(("tokens", "features")))
    """'tokens': the code's token-axis normalisation of Local_T; 'features': per-token vectors"""


def dalr_loss(s: DALRSettings, out: StudentOutputs, teacher: TeacherInputs,
              generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Every DALR term of a caption batch, "cross", "intra" and "total" (module docstring)."""
    z1, z2, w = out.z1, out.z2, s.teacher_weights
    text_logits = angular_margin_logits(z1, z2, s.temperature, s.text_margin)
    text = diagonal_cross_entropy(text_logits)
    kl = {"student_temperature": s.kl_student_temperature,
          "teacher_temperature": s.kl_teacher_temperature}
    terms: dict[str, torch.Tensor] = {"text": text}
    if (s.use_cma or s.use_ima or s.use_rank) and not teacher.text_teachers:
        raise ValueError(
            "DALR's cma/ima/rank need TeacherInputs.text_teachers (one [CLS] embedding per "
            "text teacher); pass them or set use_cma/use_ima/use_rank=False"
        )
    f_t = None
    if s.use_cma or s.use_ima:
        f_t = dalr_teacher_embedding(teacher.text_teachers, w)
    if s.use_consistency:
        ta, ia = need(out, "DALR consistency", "text_aligned", "image_aligned")
        terms["consistency"] = dalr_consistency_loss(
            ta, ia, s.consistency_margin, s.consistency_shift
        )
    if s.use_cma:
        terms["cma"] = dalr_cma_loss(
            z1, teacher.image, f_t, s.text_margin, temperature=s.temperature, **kl
        )
    if s.use_info:
        p1, p2, v = need(out, "DALR info", "p1", "p2", "v")
        adaptive = s.adaptive_margin and not is_zero(s.grounding_margin)
        vv = frozen_cosine(teacher.image, teacher.image) if adaptive else None
        terms["info"] = adapacse_loss(
            p1, p2, v, vv, s.grounding_margin if adaptive else 0.0, s.temperature_vl
        )
    if s.use_ima:
        terms["ima"] = dalr_ima_loss(z1, z2, f_t, s.text_margin, temperature=s.temperature, **kl)
    if s.use_rank:
        s_t = dalr_teacher_scores(teacher.text_teachers, w, s.teacher_temperature)
        terms["rank"] = s.rank_gamma * listmle_loss(
            text_logits, s_t, s.rank_eps, generator=generator
        )
    if s.use_g2l and not s.paper_reading:
        if teacher.text_teacher_local:
            mask = need(out, "DALR g2l", "attention_mask")[0][:, 1:]  # the code drops [CLS]
            local = dalr_teacher_local(teacher.text_teacher_local, w)
            terms["g2l"] = dalr_global_local_loss(
                local, z1, mask, temperature=s.temperature, normalize=s.g2l_normalize
            )
        else:
            terms["g2l"] = z1.new_zeros(())

    def total(*names: str, weights: dict[str, float] | None = None) -> torch.Tensor:
        weights = weights or {}
        return sum((weights.get(n, 1.0) * terms[n] for n in names if n in terms), z1.new_zeros(()))

    if s.paper_reading:
        cross = total("consistency", "cma")
        intra = total("ima", "rank")
        grand = text + total("info") + s.lam * cross + s.mu * intra
    else:
        cross = total("consistency", "cma", "info", weights={"consistency": s.consistency_weight})
        intra = total("ima", "rank", "g2l")
        grand = text + s.lam * cross + s.mu * intra
    terms.update(cross=cross, intra=intra, total=grand)
    return terms


def describe_dalr(s: DALRSettings) -> dict[str, Any]:
    """The settings DALR's loss really uses: a switched-off term takes its settings along, and
    lam / mu appear only when their bracket holds a term."""
    paper = s.paper_reading
    names = ("consistency", "cma", "info", "ima", "rank") + (() if paper else ("g2l",))
    on = {n: getattr(s, f"use_{n}") for n in names}
    out: dict[str, Any] = {"method": "dalr", "temperature": s.temperature,
                           "text_margin": s.text_margin}
    out.update({f"use_{n}": v for n, v in on.items()})
    # lam and mu weigh brackets (module docstring); info leaves lam's bracket in the paper
    if any(on[n] for n in ("consistency", "cma") + (() if paper else ("info",))):
        out["lam"] = s.lam
    if any(on.get(n) for n in ("ima", "rank", "g2l")):
        out["mu"] = s.mu
    out["paper_reading"] = paper
    if on["consistency"]:
        if not paper:
            out["consistency_weight"] = s.consistency_weight
        out.update(consistency_margin=s.consistency_margin, consistency_shift=s.consistency_shift)
    if on["info"]:
        out.update(temperature_vl=s.temperature_vl, **margin_settings(s))
    if on["cma"] or on["ima"]:
        out.update(kl_student_temperature=s.kl_student_temperature,
                   kl_teacher_temperature=s.kl_teacher_temperature)
    if on["rank"]:
        out.update(teacher_temperature=s.teacher_temperature, rank_gamma=s.rank_gamma,
                   rank_eps=s.rank_eps)
    if on.get("g2l"):
        out["g2l_normalize"] = s.g2l_normalize
    if any(on.get(n) for n in ("cma", "ima", "rank", "g2l")):
        out["teacher_weights"] = s.teacher_weights
    return out


@register
class DALR(Method):
    """DALR's consistency, CMA, Info, IMA, rank and global-local terms (module docstring)."""

    name = "dalr"
    settings = DALRSettings
    defaults_from = "official code"
    # the official scripts (docs/official-code.md §6.5); on the demo DALR keeps its own lam (0.1)
    recipes = {"paper": {"lr": 2e-5, "batch_size": 128, "epochs": 4}}

    def needs(self, s: DALRSettings) -> Needs:
        teachers = s.use_cma or s.use_ima or s.use_rank or s.use_g2l
        return Needs(image=True, text_teachers=teachers, teacher_tokens=s.use_g2l,
                     teacher_weights=s.teacher_weights if teachers else None,
                     permutations=int(s.use_rank))

    def heads(self, s: DALRSettings, dims: HeadDims) -> dict[str, Head]:
        # All four whatever the switches, as the code builds them (the init order stays the
        # code's); the aligners take z1 and the raw image feature, both at width h (§6.1).
        return {"grounding": Head("cls", dims.proj_dim, into=("p1", "p2")),
                "image_head": Head("image", dims.proj_dim, into=("v",)),
                "text_aligner": Head("z1", ALIGN_DIM, kind="aligner", normalize=False,
                                     into=("text_aligned",), width=dims.hidden),
                "image_aligner": Head("image", ALIGN_DIM, kind="aligner", normalize=False,
                                      into=("image_aligned",), width=dims.hidden)}

    def caption_loss(self, s: DALRSettings, out: StudentOutputs, teacher: TeacherInputs, *,
                     generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        return dalr_loss(s, out, teacher, generator)

    def validate(self, s: DALRSettings) -> None:
        if not any(s.teacher_weights):
            raise ValueError(f"objective.teacher_weights={s.teacher_weights}: at least one "
                             "teacher needs a weight > 0")

    def describe(self, s: DALRSettings) -> dict[str, Any]:
        return describe_dalr(s)

    def check_data(self, s: DALRSettings, store: StoreView) -> None:
        if not s.use_cma or store.image_dim is None:
            return
        if store.image_dim != store.hidden:
            raise ValueError(
                f"the store's {store.image_column!r} features are {store.image_dim}-d but DALR's "
                f"CMA compares them with the student's {store.hidden}-d embedding; use an image "
                "teacher of that size (CLIP ViT-L/14 is 768-d, as BERT-base) or set "
                "objective.use_cma=false"
            )
