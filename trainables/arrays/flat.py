"""An array's stacked parameters as views of one (M, N) buffer, their gradients of another.

Why: a BERT-base array has about 200 stacked tensors. Clipping them (a norm and a scale each) and
AdamW over them launched about 400 small kernels a step, a number set by the tensors, not by the
work (bench/launch_count.md). With every stacked parameter a view of one member-major buffer
(member i's values are row i) and its gradient a view of another, the per-member norm of all the
stacked gradients is one reduction, the clip one multiply, the update one fused AdamW call, the
gradient all-reduce of a multi-worker array one call and zeroing one fill. A gradient buffer kept
between steps is what makes this work: autograd adds a step's gradient into a ``.grad`` that
exists (in place, into the view) instead of handing over a tensor of its own.

Which tensors a step reached is recorded (a post-accumulate hook): a tensor no loss reached keeps
a zero gradient in the buffer, and ``ArrayAdamW`` gives it the per-tensor treatment it gives a
missing gradient. A gradient assigned from outside (``p.grad = g``) is copied into the buffer when
it is read. After members leave (``select``), the model's parameters are new tensors; ``adopt``
lays them out again.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class FlatStack:
    """The stacked parameters ``params`` (each (M, ...), one dtype and device) laid out as
    ``data[:, a:b]`` and ``grad[:, a:b]`` views of two contiguous (M, N) buffers."""

    def __init__(self, params: Sequence[torch.nn.Parameter]):
        if not self.fits(params):
            raise ValueError("FlatStack needs floating tensors of one dtype and device with one "
                             "leading member axis")
        self.params = list(params)
        self._reached = [False] * len(self.params)
        for k, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda _p, k=k: self._mark(k))
        self.adopt(self.params)

    @staticmethod
    def fits(params: Sequence[torch.Tensor]) -> bool:
        """Whether ``params`` can share one buffer (a looped array's MLP can; nothing can be
        flattened across dtypes or devices)."""
        if not params:
            return False
        p0 = params[0]
        return all(p.dim() >= 1 and p.shape[0] == p0.shape[0] and p.dtype == p0.dtype
                   and p.device == p0.device and p.is_floating_point() for p in params)

    def _mark(self, k: int) -> None:
        self._reached[k] = True

    @torch.no_grad()
    def adopt(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Lay ``params`` (the same tensors, possibly with new data after a member left) out in
        fresh buffers: their values and any gradients they hold are copied in."""
        if [id(p) for p in params] != [id(p) for p in self.params]:
            raise ValueError("adopt takes the parameters the stack was built over, in order")
        m = params[0].shape[0]
        sizes = [p[0].numel() if m else 0 for p in params]
        n = sum(sizes)
        p0 = params[0]
        self.data = torch.empty(m, n, dtype=p0.dtype, device=p0.device)
        self.grad = torch.zeros(m, n, dtype=p0.dtype, device=p0.device)
        self._data_views, self._grad_views = [], []
        start = 0
        for p, size in zip(params, sizes, strict=True):
            d = self.data[:, start:start + size].view(p.shape)
            g = self.grad[:, start:start + size].view(p.shape)
            d.copy_(p.data)
            if p.grad is not None:
                g.copy_(p.grad)
            p.data = d
            p.grad = g
            self._data_views.append(d)
            self._grad_views.append(g)
            start += size
        self.bounds = [0]
        for size in sizes:
            self.bounds.append(self.bounds[-1] + size)

    def views(self, buffer: torch.Tensor) -> list[torch.Tensor]:
        """Per-parameter views of another (M, N) buffer laid out as this one (AdamW's moments)."""
        return [buffer[:, a:b].view(p.shape)
                for p, a, b in zip(self.params, self.bounds[:-1], self.bounds[1:], strict=True)]

    @torch.no_grad()
    def sync(self) -> None:
        """Make the buffers current: a gradient assigned from outside is copied in (and counts
        as reached), a dropped one (``p.grad = None``) leaves zeros; the parameters must still be
        views of the data buffer (after a member left, ``adopt`` first)."""
        for k, (p, d, g) in enumerate(zip(self.params, self._data_views, self._grad_views,
                                          strict=True)):
            if p.data_ptr() != d.data_ptr() or p.shape != d.shape:
                raise RuntimeError("a stacked parameter was replaced outside the optimiser; "
                                   "call ArrayAdamW.select after the model's select")
            pg = p.grad
            if pg is None:
                g.zero_()
                p.grad = g
                self._reached[k] = False
            elif pg.data_ptr() != g.data_ptr() or pg.stride() != g.stride():
                g.copy_(pg)
                p.grad = g
                self._reached[k] = True

    def reached(self) -> list[bool]:
        """Per parameter: did a gradient reach it since the last ``zero_grad``."""
        return list(self._reached)

    @torch.no_grad()
    def zero_grad(self) -> None:
        self.grad.zero_()
        for p, g in zip(self.params, self._grad_views, strict=True):
            if p.grad is not g:
                p.grad = g
        self._reached = [False] * len(self.params)
