"""An array's stacked parameters as views of one (M, N) buffer, their gradients of another.

Why: a BERT-base array has about 200 stacked tensors. Clipping them (a norm and a scale each) and
AdamW over them launched about 400 small kernels a step, a number set by the tensors, not by the
work (bench/launch_count.md). With every stacked parameter a view of one member-major buffer
(member i's values are row i) and its gradient a view of another, the per-member norm of all the
stacked gradients is one reduction, the clip one multiply, the update one fused AdamW call and the
gradient all-reduce of a multi-worker array one call.

Backward leaves each gradient as a tensor of its own (``zero_grad`` drops them, so autograd hands
its result over without a kernel); ``sync`` gathers them into the buffer with one concatenation
and points each ``.grad`` at its view. Gathering after the backward costs one read and one write
of the gradients; accumulating into views kept between steps would cost a fill and an add a tensor.
A parameter without a gradient at ``sync`` was not reached this step: its slot is zeroed and
``ArrayAdamW`` gives it the treatment it gives a missing gradient. After members leave
(``select``), the model's parameters are new tensors; ``adopt`` lays them out again.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


class FlatStack:
    """The stacked parameters ``params`` (each (M, ...), one dtype and device) laid out as
    ``data[:, a:b]`` and ``grad[:, a:b]`` views of two contiguous (M, N) buffers (``grad`` from
    ``sync`` to ``zero_grad``, None between)."""

    def __init__(self, params: Sequence[torch.nn.Parameter]):
        if not self.fits(params):
            raise ValueError("FlatStack needs floating tensors of one dtype and device with one "
                             "leading member axis")
        self.params = list(params)
        self._reached = [False] * len(self.params)
        self._synced = False
        """whether this step's gradients are in the buffer (``sync`` since ``zero_grad``)"""
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

    @torch.no_grad()
    def adopt(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Lay ``params`` (the same tensors, possibly with new data after a member left) out in
        fresh buffers: their values are copied in; so are their gradients where this step's were
        already gathered (else they stay the backward's own, for ``sync`` to gather)."""
        if [id(p) for p in params] != [id(p) for p in self.params]:
            raise ValueError("adopt takes the parameters the stack was built over, in order")
        m = params[0].shape[0]
        sizes = [p[0].numel() if m else 0 for p in params]
        n = sum(sizes)
        p0 = params[0]
        self.bounds = [0]
        for size in sizes:
            self.bounds.append(self.bounds[-1] + size)
        self.data = torch.empty(m, n, dtype=p0.dtype, device=p0.device)
        self._data_views = self.views(self.data)
        grads = [p.grad for p in params]
        for p, d in zip(params, self._data_views, strict=True):
            d.copy_(p.data)
            p.data = d
        self.grad, self._grad_views = None, None
        if self._synced:  # this step's gradients were gathered: gather them again, flags kept
            self._new_grad_buffer()
            for p, g, view in zip(params, grads, self._grad_views, strict=True):
                view.copy_(g)
                p.grad = view

    def views(self, buffer: torch.Tensor) -> list[torch.Tensor]:
        """Per-parameter views of another (M, N) buffer laid out as this one (AdamW's moments)."""
        return [buffer[:, a:b].view(p.shape)
                for p, a, b in zip(self.params, self.bounds[:-1], self.bounds[1:], strict=True)]

    def _new_grad_buffer(self) -> None:
        """A gradient buffer for this step: made at the gather and dropped at ``zero_grad``, so
        the backward's peak memory holds no second copy of the gradients."""
        self.grad = torch.empty_like(self.data)
        self._grad_views = self.views(self.grad)

    @torch.no_grad()
    def sync(self) -> None:
        """Gather the step's gradients into the buffer and point each ``.grad`` at its view: one
        concatenation when every parameter has a gradient of its own (a backward's), else a copy
        each, zeros for a parameter without one (not reached). A gradient already in the buffer
        stays. The parameters must still be views of the data buffer (after a member left,
        ``adopt`` first)."""
        grads = []
        for p, d in zip(self.params, self._data_views, strict=True):
            if p.data_ptr() != d.data_ptr() or p.shape != d.shape:
                raise RuntimeError("a stacked parameter was replaced outside the optimiser; "
                                   "call ArrayAdamW.select after the model's select")
            grads.append(p.grad)
        own = [g is not None and not self._is_view(g, k) for k, g in enumerate(grads)]
        if self.grad is None:
            self._new_grad_buffer()
        assert self._grad_views is not None
        gathered = all(own)
        if gathered:
            m = self.data.shape[0]
            torch.cat([g.reshape(m, -1) for g in grads], dim=1, out=self.grad)
        for k, (p, g, view) in enumerate(zip(self.params, grads, self._grad_views, strict=True)):
            if own[k] or g is None:
                if g is None:
                    view.zero_()
                elif not gathered:
                    view.copy_(g)
                p.grad = view
                self._reached[k] = g is not None
        self._synced = True

    def _is_view(self, g: torch.Tensor, k: int) -> bool:
        if self._grad_views is None:
            return False
        view = self._grad_views[k]
        return g.data_ptr() == view.data_ptr() and g.stride() == view.stride()

    def reached(self) -> list[bool]:
        """Per parameter: did a gradient reach it since the last ``zero_grad``."""
        return list(self._reached)

    def zero_grad(self) -> None:
        """Drop the gradients: the next backward hands over its own, ``sync`` gathers them."""
        for p in self.params:
            p.grad = None
        self.grad, self._grad_views = None, None
        self._reached = [False] * len(self.params)
        self._synced = False


NORM_CHUNK = 4096
"""elements a CPU norm adds up in one run before the partial norms are combined (``row_norms``)"""
CHUNKED_NORM_DEVICES = ("cpu",)
"""device types whose norm ``row_norms`` takes in chunks (bench/launch_count.py counts what a GPU
launches on a CPU, so it empties this)"""


def row_norms(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(M,) L2 norm of each row of the (M, N) tensor ``x``, accumulated in ``dtype``.

    torch's CPU norm adds a row's squares one after another, so its rounding error grows with N:
    over a member's row of a stacked BERT's gradients (millions of float32 numbers) it is 1e-4 to
    1e-3 off, and the clip coefficient, so every clipped update, with it. On CPU a long row is
    therefore taken in chunks of ``NORM_CHUNK`` (a view, no copy), a norm of each, then the norm
    of those: 2e-7 off over 14M numbers, at 1.5 times the time. A GPU reduces by a tree: one norm.
    """
    m, n = x.shape
    if x.device.type not in CHUNKED_NORM_DEVICES or n <= 2 * NORM_CHUNK:
        return torch.linalg.vector_norm(x, dim=1, dtype=dtype)
    c = n // NORM_CHUNK
    parts = torch.linalg.vector_norm(x[:, : c * NORM_CHUNK].view(m, c, NORM_CHUNK), dim=2, dtype=dtype)
    if n > c * NORM_CHUNK:
        rest = torch.linalg.vector_norm(x[:, c * NORM_CHUNK:], dim=1, dtype=dtype, keepdim=True)
        parts = torch.cat([parts, rest], dim=1)
    return torch.linalg.vector_norm(parts, dim=1)
