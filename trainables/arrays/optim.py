"""AdamW, gradient clipping and the linear LR decay of every member of an array, in one pass.

Each member keeps what its own run would have: its own learning rate, weight decay and clip
norm, and Adam moments over its own parameters only. Stacked parameters carry the members on
their leading axis; a member's own parameters (its heads, a looped encoder) are plain tensors in
its slot. Nothing mixes
members: the clip norm of member i is the norm of member i's gradients alone (as
``torch.nn.utils.clip_grad_norm_`` over one run's parameters), so a NaN in one member can never
reach another.

The update is torch's AdamW (decoupled weight decay, bias-corrected moments, eps added after the
square root): its fused kernel on each member's slices, or the single-tensor update with a
per-member step size where the kernel is missing; the official recipe is AdamW
(eps 1e-6, no weight decay), linear decay to 0 without warmup, clipping at 1.0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

FUSED = hasattr(torch, "_fused_adamw_")
"""torch's fused AdamW kernel (CPU and CUDA); the single-tensor update below is the fallback"""


@dataclass(frozen=True)
class MemberHyper:
    lr: float
    weight_decay: float
    eps: float
    grad_clip: float


class ArrayAdamW:
    """Optimiser state of an array: moments per parameter, one step counter, per-member hyperparameters.

    ``stacked``: parameters of shape (M, ...) shared in layout by every member.
    ``own``: one list of parameters per member (its method's heads; a looped encoder's
    parameters, ``looped.py``), possibly empty.
    """

    def __init__(self, stacked: Sequence[torch.nn.Parameter], own: Sequence[Sequence[torch.nn.Parameter]],
                 hyper: Sequence[MemberHyper], total_steps: int, betas: tuple[float, float] = (0.9, 0.999)):
        self.stacked, self.own = list(stacked), [list(p) for p in own]
        self.hyper = list(hyper)
        if len(self.own) != len(self.hyper):
            raise ValueError(f"{len(self.own)} members' parameters but {len(self.hyper)} hyperparameter sets")
        self.total = total_steps
        self.betas = betas
        self.t = 0
        self.m_st = [torch.zeros_like(p) for p in self.stacked]
        self.v_st = [torch.zeros_like(p) for p in self.stacked]
        self.m_own = [[torch.zeros_like(p) for p in ps] for ps in self.own]
        self.v_own = [[torch.zeros_like(p) for p in ps] for ps in self.own]

    @property
    def n_members(self) -> int:
        return len(self.hyper)

    def lr_factor(self, t: int | None = None) -> float:
        """Linear decay to 0 over the run, no warmup (LambdaLR(1 - step/total) in the single loop)."""
        t = self.t if t is None else t
        return max(0.0, 1.0 - t / self.total)

    def current_lrs(self) -> list[float]:
        return [h.lr * self.lr_factor() for h in self.hyper]

    # --- clipping --------------------------------------------------------------------------
    def _own_grads(self) -> tuple[list[torch.Tensor], list[int]]:
        """The members' own parameters' gradients in one flat list, and each one's member."""
        grads, owner = [], []
        for i, ps in enumerate(self.own):
            for p in ps:
                if p.grad is not None:
                    grads.append(p.grad)
                    owner.append(i)
        return grads, owner

    @torch.no_grad()
    def member_grad_norms(self, own: tuple[list[torch.Tensor], list[int]] | None = None) -> torch.Tensor:
        """(M,) L2 norm of each member's gradients (None grads count as 0).

        As ``clip_grad_norm_``: the norm of the per-tensor norms, one norm kernel per stacked
        parameter (all members at once) and one foreach call for the heads, so the host cost does
        not grow with M times the number of tensors. ``own``: ``_own_grads()``, if already taken."""
        grads, owner = self._own_grads() if own is None else own
        dev = (self.stacked[0].device if self.stacked else grads[0].device if grads
               else torch.device("cpu"))  # a looped array has no stacked parameters
        sq = torch.zeros(self.n_members, dtype=torch.float32, device=dev)
        norms = [torch.linalg.vector_norm(p.grad.detach().flatten(1), dim=1, dtype=torch.float32)
                 for p in self.stacked if p.grad is not None]
        if norms:
            sq += torch.stack(norms).pow(2).sum(0)
        if grads:
            heads = torch.stack(torch._foreach_norm([g.detach().float() for g in grads]))
            sq.index_add_(0, torch.tensor(owner, device=dev), heads.pow(2))
        return sq.sqrt()

    @torch.no_grad()
    def clip(self) -> torch.Tensor:
        """Scale each member's gradients to its own clip norm, as clip_grad_norm_; returns the norms."""
        grads, owner = self._own_grads()
        norms = self.member_grad_norms((grads, owner))
        limit = torch.tensor([h.grad_clip for h in self.hyper], device=norms.device)
        coef = (limit / (norms + 1e-6)).clamp(max=1.0)
        for p in self.stacked:
            if p.grad is not None:
                p.grad.mul_(coef.to(p.grad.dtype).view(-1, *([1] * (p.dim() - 1))))
        if grads:  # one foreach call, not a kernel per head tensor (an array's grows with M)
            per = coef[torch.tensor(owner, device=coef.device)]
            torch._foreach_mul_(grads, [c.to(g.dtype) for g, c in zip(grads, per.unbind(), strict=True)])
        return norms

    # --- the update ------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        # The LR of step t is the schedule's value before it advances (LambdaLR semantics).
        lrs = [h.lr * self.lr_factor(self.t - 1) for h in self.hyper]
        if FUSED:
            self._fused_step(lrs)
            return
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        if self.stacked:
            dev = self.stacked[0].device
            lr_vec = torch.tensor(lrs, dtype=torch.float32, device=dev)
            wd_vec = torch.tensor([h.weight_decay for h in self.hyper], device=dev)
            eps_vec = torch.tensor([h.eps for h in self.hyper], device=dev)
            for p, m, v in zip(self.stacked, self.m_st, self.v_st, strict=True):
                if p.grad is None:
                    continue
                shape = (-1, *([1] * (p.dim() - 1)))
                self._update(p, p.grad, m, v, lr_vec.view(shape), wd_vec.view(shape),
                             eps_vec.view(shape), c1, c2)
        for i, (ps, ms, vs) in enumerate(zip(self.own, self.m_own, self.v_own, strict=True)):
            h = self.hyper[i]
            for p, m, v in zip(ps, ms, vs, strict=True):
                if p.grad is not None:
                    self._update(p, p.grad, m, v, lrs[i], h.weight_decay, h.eps, c1, c2)

    def _fused_step(self, lrs: list[float]) -> None:
        """torch's fused AdamW kernel (the ``fused=True`` update) on each member's slices.

        Members with equal (lr, weight decay, eps) go in one call; a slice ``p[i]`` of a stacked
        parameter is a contiguous view, so the update lands in place and stays per member.
        On CPU it is much faster than the single-tensor update over MiniLM's word embeddings
        (bench/README.md, "profile_step.py").
        """
        # Runs of neighbouring members with equal (lr, weight decay, eps) update as one slice
        # p[a:b] (the whole tensor when all agree): the kernel's tensor list, and its host cost,
        # then grows with the number of runs, not with M.
        groups: dict[tuple[float, float, float], list[tuple[int, int]]] = {}
        prev, start = None, 0
        for i in range(self.n_members + 1):
            key = (lrs[i], self.hyper[i].weight_decay, self.hyper[i].eps) if i < self.n_members else None
            if i and key != prev:
                groups.setdefault(prev, []).append((start, i))
                start = i
            prev = key
        b1, b2 = self.betas
        for (lr, wd, eps), runs in groups.items():
            by_key: dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]] = {}
            quads = [(p[a:b], p.grad[a:b], m[a:b], v[a:b])
                     for p, m, v in zip(self.stacked, self.m_st, self.v_st, strict=True)
                     if p.grad is not None for a, b in runs]
            quads += [(p, p.grad, m, v) for a, b in runs for i in range(a, b)
                      for p, m, v in zip(self.own[i], self.m_own[i], self.v_own[i], strict=True)
                      if p.grad is not None]
            for p, g, m, v in quads:
                lists = by_key.setdefault((p.device, p.dtype), [[], [], [], []])
                for dst, t in zip(lists, (p, g if g.dtype == p.dtype else g.to(p.dtype), m, v), strict=True):
                    dst.append(t)
            for (dev, _), (ps, gs, ms, vs) in by_key.items():
                step = torch.tensor(float(self.t), dtype=torch.float32, device=dev)
                torch._fused_adamw_(ps, gs, ms, vs, [], [step] * len(ps), lr=lr, beta1=b1, beta2=b2,
                                    weight_decay=wd, eps=eps, amsgrad=False, maximize=False)

    def _update(self, p, g, m, v, lr, wd, eps, c1: float, c2: float) -> None:
        """torch's single-tensor AdamW step; ``lr``/``wd``/``eps`` are floats or (M, 1, ...) tensors."""
        b1, b2 = self.betas
        g = g.to(p.dtype)
        if isinstance(wd, torch.Tensor) or wd != 0.0:
            p.mul_(1 - lr * wd)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v.sqrt() / (c2**0.5)).add_(eps)
        if isinstance(lr, torch.Tensor):
            p.addcdiv_(m * (lr / c1), denom, value=-1.0)
        else:
            p.addcdiv_(m, denom, value=-lr / c1)

    def zero_grad(self) -> None:
        for p in self.stacked:
            p.grad = None
        for ps in self.own:
            for p in ps:
                p.grad = None

    # --- members leave ---------------------------------------------------------------------
    def select(self, keep: Sequence[int], stacked: Sequence[torch.nn.Parameter]) -> None:
        """Keep members ``keep`` (in that order); ``stacked`` are the model's re-selected parameters."""
        idx = torch.as_tensor(list(keep), dtype=torch.long)
        self.stacked = list(stacked)
        self.m_st = [m[idx.to(m.device)] for m in self.m_st]
        self.v_st = [v[idx.to(v.device)] for v in self.v_st]
        self.own = [self.own[i] for i in keep]
        self.m_own = [self.m_own[i] for i in keep]
        self.v_own = [self.v_own[i] for i in keep]
        self.hyper = [self.hyper[i] for i in keep]

    # --- checkpoint ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"t": self.t, "m_st": self.m_st, "v_st": self.v_st,
                "m_own": self.m_own, "v_own": self.v_own}

    def load_state_dict(self, state: dict) -> None:
        def into(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
            if len(dst) != len(src) or any(a.shape != b.shape for a, b in zip(dst, src, strict=True)):
                raise ValueError("optimiser state does not fit this array; resume with the same members")
            for a, b in zip(dst, src, strict=True):
                a.copy_(b)

        self.t = int(state["t"])
        into(self.m_st, state["m_st"])
        into(self.v_st, state["v_st"])
        for dst, src in zip(self.m_own, state["m_own"], strict=True):
            into(dst, src)
        for dst, src in zip(self.v_own, state["v_own"], strict=True):
            into(dst, src)
