"""AdamW, gradient clipping and the linear LR decay of every member of an array, in one pass.

Each member keeps what its own run would have: its own learning rate, weight decay and clip
norm, and Adam moments over its own parameters only. Stacked parameters carry the members on
their leading axis; a member's own parameters (its heads, a looped encoder) are plain tensors in
its slot. Nothing mixes
members: the clip norm of member i is the norm of member i's gradients alone (as
``torch.nn.utils.clip_grad_norm_`` over one run's parameters), so a NaN in one member can never
reach another.

Two updates, one per member (``RunConfig.optimizer``), docs/official-code.md "The loop":

- ``"official"`` (default): ``transformers.AdamW`` 4.x as the official code ran it under torch
  1.7/1.8. ``denom = sqrt(v) + eps``, step size ``lr * sqrt(1 - b2^s) / (1 - b1^s)`` with ``s``
  the parameter's own step count, weight decay ``p -= lr * wd * p`` after the update. A
  parameter a step does not reach (a head on a text step) keeps a zero gradient once it has
  state, as torch 1.7's ``zero_grad`` left it: its moments decay, it moves by momentum and its
  step count advances. A parameter never reached has no state and does not move.
- ``"torch"``: torch 2's AdamW with ``zero_grad(set_to_none=True)``: ``denom = sqrt(v) /
  sqrt(1 - b2^s) + eps``, weight decay before the update, a parameter without a gradient skipped
  (its step count does not advance).

The two differ only in where eps sits, so the official step is torch's with
``eps / sqrt(1 - b2^s)``: the fused kernel serves both (one call per distinct (lr, wd, eps, s));
the single-tensor update is the fallback where the kernel is missing or has changed (torch's
private calls, and their checks, are in ``kernels.py``). The official recipe is
eps 1e-6, no weight decay, linear decay to 0 without warmup, clipping at 1.0.

The stacked parameters live in one (M, N) buffer and their gradients in another (``flat.py``):
a step's norms, clip and update of every stacked tensor are then a few kernels, not a few per
tensor; the moments share that layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trainables.arrays import kernels
from trainables.arrays.device_constants import DeviceConstants
from trainables.arrays.flat import FlatStack, row_norms

OPTIMIZERS = ("official", "torch")
"""``RunConfig.optimizer`` values: see the module docstring"""

@dataclass(frozen=True)
class MemberHyper:
    lr: float
    weight_decay: float
    eps: float
    grad_clip: float
    optimizer: str = "official"

    @property
    def official(self) -> bool:
        return self.optimizer == "official"


class ArrayAdamW:
    """Optimiser state of an array: moments and a step count per parameter, per-member hyperparameters.

    ``stacked``: parameters of shape (M, ...) shared in layout by every member; all but those in
    ``apart`` become views of one buffer (``flat.py``). ``apart``: stacked parameters that must
    stay contiguous tensors of their own (an embedding table the encoder reads across members
    as one (M * V, H) table: a view of the buffer would be copied whole at every read).
    ``own``: one list of parameters per member (its method's heads; a looped encoder's
    parameters, ``looped.py``), possibly empty.
    ``t`` counts the array's steps (the LR schedule); each parameter's own count (0: no state
    yet) drives its bias correction.
    """

    def __init__(self, stacked: Sequence[torch.nn.Parameter], own: Sequence[Sequence[torch.nn.Parameter]],
                 hyper: Sequence[MemberHyper], total_steps: int, betas: tuple[float, float] = (0.9, 0.999),
                 apart: Sequence[torch.nn.Parameter] = ()):
        self.stacked, self.own = list(stacked), [list(p) for p in own]
        self.hyper = list(hyper)
        if len(self.own) != len(self.hyper):
            raise ValueError(f"{len(self.own)} members' parameters but {len(self.hyper)} hyperparameter sets")
        bad = {h.optimizer for h in self.hyper} - set(OPTIMIZERS)
        if bad:
            raise ValueError(f"optimizer={sorted(bad)[0]!r}: use one of {', '.join(map(repr, OPTIMIZERS))}")
        self.total = total_steps
        self.betas = betas
        self.t = 0
        keep_apart = {id(p) for p in apart}
        flat_idx = [k for k, p in enumerate(self.stacked) if id(p) not in keep_apart]
        fits = FlatStack.fits([self.stacked[k] for k in flat_idx])
        self.flat_idx = flat_idx if fits else []
        """positions in ``stacked`` of the tensors laid out in ``flat``"""
        self.loose_idx = [k for k in range(len(self.stacked)) if k not in set(self.flat_idx)]
        """positions in ``stacked`` of the tensors kept as tensors of their own"""
        self.flat = FlatStack([self.stacked[k] for k in self.flat_idx]) if fits else None
        """the stacked parameters (less ``apart``) and their gradients as views of two (M, N)
        buffers, or None (none to lay out, or of mixed dtypes)"""
        # The laid-out tensors' moments become views of the flat buffers (``_flat_moments``):
        # zeros only for the others, not a first copy of every stacked weight thrown away (on
        # ten MiniLM members, 1.8 GB allocated and freed, ~0.8 s).
        loose = set(self.loose_idx)
        self.m_st = [torch.zeros_like(p) if k in loose else None for k, p in enumerate(self.stacked)]
        self.v_st = [torch.zeros_like(p) if k in loose else None for k, p in enumerate(self.stacked)]
        if self.flat is not None:
            self.m_flat, self.v_flat = (torch.zeros_like(self.flat.data) for _ in range(2))
            self._flat_moments()
        self.m_own = [[torch.zeros_like(p) for p in ps] for ps in self.own]
        self.v_own = [[torch.zeros_like(p) for p in ps] for ps in self.own]
        # Stacked parameters are reached for every member at once (one shared forward), so one
        # count per tensor; a member's own parameters have their own.
        self.s_st = [0] * len(self.stacked)
        self.s_own = [[0] * len(ps) for ps in self.own]
        self._on_device = DeviceConstants()

    def _flat_moments(self) -> None:
        """``m_st``/``v_st`` of the laid-out tensors as views of the moment buffers."""
        assert self.flat is not None
        for k, m, v in zip(self.flat_idx, self.flat.views(self.m_flat), self.flat.views(self.v_flat),
                           strict=True):
            self.m_st[k], self.v_st[k] = m, v

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

        As ``clip_grad_norm_`` (the norm of the per-tensor norms, which is the norm of all the
        member's gradients together): one norm over each member's row of the flat buffer, one per
        tensor kept apart (all members at once) and one foreach call for the heads, so the host
        cost does not grow with M or the number of tensors. ``own``: ``_own_grads()``, if taken."""
        grads, owner = self._own_grads() if own is None else own
        dev = (self.stacked[0].device if self.stacked else grads[0].device if grads
               else torch.device("cpu"))  # a looped array has no stacked parameters
        # at least float32 (bf16 gradients), float64 for float64 parameters (a reference check)
        acc = torch.float32
        for t in (*self.stacked, *grads):
            acc = torch.promote_types(acc, t.dtype)
        norms = [row_norms(p.grad.detach().flatten(1), acc) for p in self._loose() if p.grad is not None]
        if self.flat is not None:  # a member's laid-out gradients are its row of one buffer
            self.flat.sync()
            norms.append(row_norms(self.flat.grad, acc))
        if len(norms) == 1:
            sq = norms[0].pow(2)
        else:
            sq = torch.zeros(self.n_members, dtype=acc, device=dev)
            if norms:
                sq += torch.stack(norms).pow(2).sum(0)
        if grads:
            heads = torch.stack(kernels.foreach_norm([g.detach().to(acc) for g in grads]))
            sq.index_add_(0, self._on_device(owner, torch.long, sq.device), heads.pow(2))
        return sq.sqrt()

    @torch.no_grad()
    def clip(self) -> torch.Tensor:
        """Scale each member's gradients to its own clip norm, as clip_grad_norm_; returns the norms."""
        grads, owner = self._own_grads()
        norms = self.member_grad_norms((grads, owner))
        limit = self._on_device([h.grad_clip for h in self.hyper], torch.float32, norms.device)
        coef = (limit / (norms + 1e-6)).clamp(max=1.0)
        if self.flat is not None:
            self.flat.grad.mul_(coef.to(self.flat.grad.dtype).view(-1, 1))
        for p in self._loose():
            if p.grad is not None:
                p.grad.mul_(coef.to(p.grad.dtype).view(-1, *([1] * (p.dim() - 1))))
        if grads:  # one foreach call, not a kernel per head tensor (an array's grows with M)
            per = coef[self._on_device(owner, torch.long, coef.device)]
            kernels.foreach_mul_(grads, [c.to(g.dtype) for g, c in zip(grads, per.unbind(), strict=True)])
        return norms

    # --- the update ------------------------------------------------------------------------
    def _work(self) -> list[tuple[int | None, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]]:
        """(member or None for stacked, param, grad, m, v, step count after this step) of every
        tensor this step updates; advances the counts. A tensor without a gradient steps on a
        zero gradient if it has state and its member (any member, for a stacked tensor) is
        official; otherwise it is skipped."""
        any_official = any(h.official for h in self.hyper)
        work = []
        if self.flat is not None:
            work += self._flat_work(any_official)
        for k in self.loose_idx:
            p, m, v = self.stacked[k], self.m_st[k], self.v_st[k]
            g = p.grad
            if g is None and not (any_official and self.s_st[k]):
                continue
            self.s_st[k] += 1
            work.append((None, p, torch.zeros_like(p) if g is None else g, m, v, self.s_st[k]))
        for i, (ps, ms, vs) in enumerate(zip(self.own, self.m_own, self.v_own, strict=True)):
            official = self.hyper[i].official
            for k, (p, m, v) in enumerate(zip(ps, ms, vs, strict=True)):
                g = p.grad
                if g is None and not (official and self.s_own[i][k]):
                    continue
                self.s_own[i][k] += 1
                work.append((i, p, torch.zeros_like(p) if g is None else g, m, v, self.s_own[i][k]))
        return work

    def _flat_work(self, any_official: bool) -> list[tuple]:
        """``_work``'s items for the stacked tensors: the whole buffer as one item when every
        tensor steps at one count (every step of a built-in method: every loss reaches the whole
        encoder and the MLP), else one item per stepping tensor, as without the buffer. An
        unreached tensor's gradient is the zeros the buffer holds for it."""
        assert self.flat is not None
        self.flat.sync()
        counts = [self.s_st[k] for k in self.flat_idx]
        take = [r or (any_official and s > 0) for r, s in zip(self.flat.reached(), counts, strict=True)]
        for k, t in zip(self.flat_idx, take, strict=True):
            if t:
                self.s_st[k] += 1
        after = {self.s_st[k] for k in self.flat_idx}
        if all(take) and len(after) == 1:
            return [(None, self.flat.data, self.flat.grad, self.m_flat, self.v_flat, after.pop())]
        grads = self.flat.views(self.flat.grad)
        return [(None, self.stacked[k], g, self.m_st[k], self.v_st[k], self.s_st[k])
                for k, g, t in zip(self.flat_idx, grads, take, strict=True) if t]

    def _loose(self) -> list[torch.nn.Parameter]:
        """The stacked parameters kept as tensors of their own."""
        return [self.stacked[k] for k in self.loose_idx]

    def _eps(self, h: MemberHyper, s: int) -> float:
        """The eps of torch's update that gives this member's update at step count ``s``."""
        return h.eps / (1 - self.betas[1] ** s) ** 0.5 if h.official else h.eps

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        # The LR of step t is the schedule's value before it advances (LambdaLR semantics).
        lrs = [h.lr * self.lr_factor(self.t - 1) for h in self.hyper]
        work = self._work()
        if kernels.FUSED_ADAMW:
            self._fused_step(lrs, work)
            return
        b1 = self.betas[0]
        for i, p, g, m, v, s in work:
            if i is None:
                shape = (-1, *([1] * (p.dim() - 1)))

                def vec(xs, p=p, shape=shape):
                    return torch.tensor(xs, dtype=p.dtype, device=p.device).view(shape)

                lr = vec(lrs)
                wd_pre = vec([0.0 if h.official else h.weight_decay for h in self.hyper])
                wd_post = vec([h.weight_decay if h.official else 0.0 for h in self.hyper])
                eps = vec([self._eps(h, s) for h in self.hyper])
            else:
                h = self.hyper[i]
                lr, eps = lrs[i], self._eps(h, s)
                wd_pre, wd_post = (0.0, h.weight_decay) if h.official else (h.weight_decay, 0.0)
            self._update(p, g, m, v, lr, wd_pre, wd_post, eps, 1 - b1**s, 1 - self.betas[1] ** s)

    def _fused_step(self, lrs: list[float], work) -> None:
        """torch's fused AdamW kernel (the ``fused=True`` update) on each member's slices.

        Members with equal (lr, weight decay, eps) go in one call; a slice ``p[i]`` of a stacked
        parameter is a contiguous view, so the update lands in place and stays per member.
        On CPU it is much faster than the single-tensor update over MiniLM's word embeddings
        (bench/README.md, "profile_step.py").
        """
        b1, b2 = self.betas
        # Runs of neighbouring members with equal (lr, weight decay, eps, update) update as one
        # slice p[a:b] (the whole tensor when all agree): the kernel's tensor list, and its host
        # cost, then grows with the number of runs, not with M. The official eps depends on the
        # step count, so stacked tensors are grouped per count too (they share one in practice).
        counts = sorted({s for i, *_rest, s in work if i is None})
        runs_at: dict[int, dict[tuple, list[tuple[int, int]]]] = {}
        for s in counts:
            groups: dict[tuple, list[tuple[int, int]]] = {}
            prev, start = None, 0
            for i in range(self.n_members + 1):
                h = self.hyper[i] if i < self.n_members else None
                key = (lrs[i], h.weight_decay, self._eps(h, s), h.official) if h else None
                if i and key != prev:
                    groups.setdefault(prev, []).append((start, i))
                    start = i
                prev = key
            runs_at[s] = groups
        calls: dict[tuple, list[tuple[torch.Tensor, ...]]] = {}
        for i, p, g, m, v, s in work:
            if i is None:
                for key, runs in runs_at[s].items():
                    for a, b in runs:
                        # the kernel walks a tensor in memory order: a run of members of one
                        # parameter's view of the flat buffer has gaps (other parameters' values),
                        # so it goes member by member; the buffer's own rows have none
                        parts = ([(a, b)] if p[a:b].is_contiguous()
                                 else [(j, j + 1) for j in range(a, b)])
                        calls.setdefault((*key, s), []).extend(
                            (p[c:d], g[c:d], m[c:d], v[c:d]) for c, d in parts)
            else:
                h = self.hyper[i]
                calls.setdefault((lrs[i], h.weight_decay, self._eps(h, s), h.official, s), []).append((p, g, m, v))
        for (lr, wd, eps, official, s), quads in calls.items():
            by_key: dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]] = {}
            for p, g, m, v in quads:
                lists = by_key.setdefault((p.device, p.dtype), [[], [], [], []])
                # the fused kernel walks a gradient in its parameter's memory order: a gradient
                # with other strides (a transposed view) would be applied to the wrong elements
                g = g if g.dtype == p.dtype else g.to(p.dtype)
                g = g if g.stride() == p.stride() else g.contiguous()
                for dst, t in zip(lists, (p, g, m, v), strict=True):
                    dst.append(t)
            for (dev, _), (ps, gs, ms, vs) in by_key.items():
                # a fill, not a copy from the host: the count changes every step
                step = torch.full((), float(s), dtype=torch.float32, device=dev)
                kernels.fused_adamw_(ps, gs, ms, vs, [step] * len(ps), lr=lr, beta1=b1, beta2=b2,
                                     weight_decay=0.0 if official else wd, eps=eps)
                if official and wd > 0.0:  # transformers.AdamW decays after the update
                    kernels.foreach_mul_(ps, 1.0 - lr * wd)

    def _update(self, p, g, m, v, lr, wd_pre, wd_post, eps, c1: float, c2: float) -> None:
        """One single-tensor AdamW step in torch's form, ``denom = sqrt(v)/sqrt(c2) + eps`` (the
        official form through ``eps``, see ``_eps``); ``lr``/``wd_*``/``eps`` are floats or
        (M, 1, ...) tensors."""
        b1, b2 = self.betas
        g = g.to(p.dtype)
        if isinstance(wd_pre, torch.Tensor) or wd_pre != 0.0:
            p.mul_(1 - lr * wd_pre)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v.sqrt() / (c2**0.5)).add_(eps)
        if isinstance(lr, torch.Tensor):
            p.addcdiv_(m * (lr / c1), denom, value=-1.0)
        else:
            p.addcdiv_(m, denom, value=-lr / c1)
        if isinstance(wd_post, torch.Tensor) or wd_post != 0.0:
            p.mul_(1 - lr * wd_post)

    # --- a captured step (capture.py) -----------------------------------------------------
    def reached(self) -> tuple[tuple[bool, ...], tuple[tuple[bool, ...], ...]]:
        """After a backward, before ``clip``: which stacked tensors and which of each member's
        own tensors have a gradient (what a captured step of the same structure will reach)."""
        return (tuple(p.grad is not None for p in self.stacked),
                tuple(tuple(p.grad is not None for p in ps) for ps in self.own))

    def captured_plan(self, reached: tuple[tuple[bool, ...], tuple[tuple[bool, ...], ...]],
                      ) -> tuple[tuple, list[float]]:
        """The host's half of a captured step's update: ``step``'s bookkeeping (the array's
        count ``t`` and each tensor's own step count, advanced by ``_work``'s rules for the
        gradients ``reached`` gives) without touching a tensor. -> (the layout: which tensors
        step and where their numbers sit in the vector, a constant while the structure is;
        the vector: each member's lr and weight decays, and per step count the members' eps and
        the bias corrections, computed as ``step`` computes them), for ``captured_update``."""
        self.t += 1
        m = self.n_members
        lrs = [h.lr * self.lr_factor(self.t - 1) for h in self.hyper]
        any_official = any(h.official for h in self.hyper)
        vec = [*lrs, *(0.0 if h.official else h.weight_decay for h in self.hyper),
               *(h.weight_decay if h.official else 0.0 for h in self.hyper)]
        at: dict[tuple[int | None, int], int] = {}  # (member or None, count) -> offset in vec
        b1, b2 = self.betas

        def numbers(i: int | None, s: int) -> int:
            if (i, s) not in at:
                at[(i, s)] = len(vec)
                hs = self.hyper if i is None else [self.hyper[i]]
                vec.extend(self._eps(h, s) for h in hs)
                vec.extend((1 - b1**s, 1 - b2**s))
            return at[(i, s)]

        stacked = []
        for k, r in enumerate(reached[0]):
            take = r or (any_official and self.s_st[k] > 0)
            if take:
                self.s_st[k] += 1
            stacked.append((take, r, numbers(None, self.s_st[k]) if take else -1))
        own = []
        for i, rs in enumerate(reached[1]):
            official = self.hyper[i].official
            row = []
            for k, r in enumerate(rs):
                take = r or (official and self.s_own[i][k] > 0)
                if take:
                    self.s_own[i][k] += 1
                row.append((take, r, numbers(i, self.s_own[i][k]) if take else -1))
            own.append(tuple(row))
        return (m, tuple(stacked), tuple(own)), vec

    @torch.no_grad()
    def captured_update(self, layout: tuple, vec: torch.Tensor, grads_st: Sequence[torch.Tensor | None],
                        grads_own: Sequence[Sequence[torch.Tensor | None]], ok: torch.Tensor) -> None:
        """``clip`` and ``step`` as tensor code with no host read and no Python number that
        changes between steps, for a captured step: the numbers come in ``vec``
        (``captured_plan``'s vector, on the device) and the gradients from the step's own
        ``autograd.grad``. A member whose ``ok`` is False keeps its weights (it leaves the array
        after the step, as the finite check drops it before the eager update). The same update as
        the eager one, to float rounding (it is written out, not torch's fused kernel: the
        official eps changes with the step count, which the kernel takes as a Python number)."""
        m, stacked, own = layout
        b1, b2 = self.betas
        lr, wd_pre, wd_post = vec[:m], vec[m:2 * m], vec[2 * m:3 * m]
        # each member's gradient norm over its stacked rows and its own tensors, as ``clip``
        sq = [torch.linalg.vector_norm(g.flatten(1), dim=1, dtype=torch.float32).pow(2)
              for g in grads_st if g is not None]
        total = torch.stack(sq).sum(0) if sq else vec.new_zeros(m)
        own_sq = []
        for gs in grads_own:
            parts = [torch.linalg.vector_norm(g, dtype=torch.float32).pow(2) for g in gs if g is not None]
            own_sq.append(torch.stack(parts).sum() if parts else vec.new_zeros(()))
        norms = (total + torch.stack(own_sq)).sqrt()
        limit = torch.tensor([h.grad_clip for h in self.hyper], dtype=torch.float32, device=vec.device)
        coef = (limit / (norms + 1e-6)).clamp(max=1.0)

        def update(p, g, mo, v, i, at, keep) -> None:
            n = 1 if i is not None else m
            eps = vec[at:at + n]
            c1, c2 = vec[at + n], vec[at + n + 1]
            if i is None:
                shape = (-1, *([1] * (p.dim() - 1)))
                lr_, pre, post, eps, c = (x.view(shape) for x in (lr, wd_pre, wd_post, eps, coef))
                keep = keep.view(shape)
            else:
                lr_, pre, post, eps, c = lr[i], wd_pre[i], wd_post[i], eps[0], coef[i]
            g = (g * c).to(p.dtype) if g is not None else torch.zeros_like(p)
            m1 = mo.lerp(g, 1 - b1)
            v1 = v * b2 + (1 - b2) * g * g
            p1 = p * (1 - lr_ * pre)
            p1 = p1 - (lr_ / c1) * m1 / (v1.sqrt() / c2.sqrt() + eps)
            p1 = p1 * (1 - lr_ * post)
            for dst, new in ((p, p1), (mo, m1), (v, v1)):
                dst.copy_(torch.where(keep, new, dst))

        for k, (take, _reached, at) in enumerate(stacked):
            if take:
                update(self.stacked[k], grads_st[k], self.m_st[k], self.v_st[k], None, at, ok)
        for i, row in enumerate(own):
            for k, (take, _reached, at) in enumerate(row):
                if take:
                    update(self.own[i][k], grads_own[i][k], self.m_own[i][k], self.v_own[i][k], i,
                           at, ok[i])

    def zero_grad(self) -> None:
        if self.flat is not None:  # drops them: the next backward's are gathered at its sync
            self.flat.zero_grad()
        for p in self._loose():
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
        if self.flat is not None:  # the model's select gave the parameters new tensors
            self.m_flat = self.m_flat[idx.to(self.m_flat.device)]
            self.v_flat = self.v_flat[idx.to(self.v_flat.device)]
            self.flat.adopt([self.stacked[k] for k in self.flat_idx])
            self._flat_moments()
        self.own = [self.own[i] for i in keep]
        self.s_own = [self.s_own[i] for i in keep]
        self.m_own = [self.m_own[i] for i in keep]
        self.v_own = [self.v_own[i] for i in keep]
        self.hyper = [self.hyper[i] for i in keep]
        self._on_device.clear()

    # --- checkpoint ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"t": self.t, "m_st": self.m_st, "v_st": self.v_st,
                "m_own": self.m_own, "v_own": self.v_own, "s_st": self.s_st, "s_own": self.s_own}

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
        if "s_st" not in state:
            raise ValueError("optimiser state has no per-parameter step counts (written before "
                             "the official AdamW): start the run again")
        self.s_st = [int(s) for s in state["s_st"]]
        self.s_own = [[int(s) for s in ss] for ss in state["s_own"]]
