"""torch's private multi-tensor kernels, in one place, each checked at import.

Why private calls at all: an array's optimiser keeps one AdamW state per member inside stacked
tensors (``optim.py``), which no public ``torch.optim`` class can hold, and the public way to
scale, copy or take the norm of many tensors is a kernel per tensor. So the array calls:

- ``torch._fused_adamw_``: the kernel behind ``torch.optim.AdamW(fused=True)``, on each run of
  members with equal settings (``optim.py``): one call instead of a dozen kernels per tensor;
- ``torch._foreach_norm`` and ``torch._foreach_mul_``: the heads' gradient norms and clipping,
  and transformers' weight decay after the update (``optim.py``): one call for every tensor;
- ``torch._foreach_copy_``: the heads' BatchNorm statistics back into each member
  (``batched.py``): one call for every member;
- ``torch._dynamo.config``: ``trace_autograd_ops``, the switch that lets a compiled function
  call ``torch.autograd.grad`` (off by default in torch 2.13), and ``recompile_limit``, for the
  captured whole step of ``compile=graphs`` (``capture.py``). Where the switch is missing, the
  encoder alone is captured, and a line says why.
- ``torch.utils._python_dispatch.TorchDispatchMode``: counting the operators a method's heads and
  loss run (``method_check.py``'s cost of one by one), which no public API sees below autograd;
  its ``_should_skip_dynamo``, overridden so that counting does not import torch._dynamo.

Each is looked up once, here, and its schema (``torch.ops.aten``) is compared with the call this
module makes: the names and types of its positional arguments in their order (the fused kernel
takes six tensor lists; a torch that reordered two would update the wrong moments without an
error) and the keywords it is given. One that is missing or has changed is not called: its public
equivalent runs instead (a loop of ``mul_``, ``copy_`` or ``linalg.vector_norm``; for AdamW,
``optim.py``'s single-tensor update), the same update to float rounding at more kernels a step.
``announce`` prints once per process which optimiser path a run takes, as nanoGPT prints "using
fused AdamW". ``tests/trainables/runtime/test_private_apis.py`` fails when an upgrade moves one
of them, and when any other module calls a private torch function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

LIST = "List[Tensor]"


@dataclass(frozen=True)
class Call:
    """How this module calls one private function: the overload it relies on, its positional
    arguments (name, type) in order, and the keywords it passes."""

    name: str
    overload: str
    positional: tuple[tuple[str, str], ...]
    keywords: tuple[str, ...] = ()


CALLS = (
    Call("torch._fused_adamw_", "default",
         (("self", LIST), ("grads", LIST), ("exp_avgs", LIST), ("exp_avg_sqs", LIST),
          ("max_exp_avg_sqs", LIST), ("state_steps", LIST)),
         ("lr", "beta1", "beta2", "weight_decay", "eps", "amsgrad", "maximize")),
    Call("torch._foreach_norm", "Scalar", (("self", LIST),)),
    Call("torch._foreach_mul_", "List", (("self", LIST), ("other", LIST))),
    Call("torch._foreach_mul_", "Scalar", (("self", LIST), ("scalar", "number"))),
    Call("torch._foreach_copy_", "default", (("self", LIST), ("src", LIST))),
)
"""every private torch call of the project"""


def mismatch(call: Call, schema=None) -> str | None:
    """Why ``call`` cannot be made on this torch (missing, or its schema differs), or None.
    ``schema``: the operator's schema, read from ``torch.ops.aten`` when not given."""
    attr = call.name.removeprefix("torch.")
    if not callable(getattr(torch, attr, None)):
        return f"{call.name} is missing"
    if schema is None:
        overload = getattr(getattr(torch.ops.aten, attr, None), call.overload, None)
        if overload is None:
            return f"{call.name} has no {call.overload!r} overload"
        schema = overload._schema
    args = list(schema.arguments)
    positional = [(a.name, str(a.type)) for a in args if not a.kwarg_only]
    names = [n for n, _ in positional]
    if names[: len(call.positional)] != [n for n, _ in call.positional]:
        return f"{call.name} now takes ({', '.join(names)})"
    for (n, t), (_, want) in zip(positional, call.positional, strict=False):
        if t != want:
            return f"{call.name}'s {n} is now {t}, not {want}"
    passed = {n for n, _ in call.positional} | set(call.keywords)
    known = {a.name for a in args}
    missing = [k for k in call.keywords if k not in known]
    required = [a.name for a in args if a.name not in passed and not a.has_default_value()]
    if missing or required:
        return (f"{call.name} no longer takes {', '.join(missing)}" if missing else
                f"{call.name} now requires {', '.join(required)}")
    return None


def _usable(name: str) -> tuple[Callable | None, str | None]:
    """The private function ``name`` when every overload this module calls fits, else
    (None, why)."""
    for call in CALLS:
        if call.name == name and (why := mismatch(call)):
            return None, why
    return getattr(torch, name.removeprefix("torch.")), None


_adamw_kernel, FUSED_ADAMW_WHY = _usable("torch._fused_adamw_")
_norm_kernel, _NORM_WHY = _usable("torch._foreach_norm")
_mul_kernel, _MUL_WHY = _usable("torch._foreach_mul_")
_copy_kernel, _COPY_WHY = _usable("torch._foreach_copy_")
FUSED_ADAMW = _adamw_kernel is not None
"""whether the fused AdamW kernel runs; else ``optim.py``'s single-tensor update does"""


def fallbacks() -> dict[str, str]:
    """Private function -> why its public equivalent runs instead (empty: none does)."""
    whys = {"torch._fused_adamw_": FUSED_ADAMW_WHY, "torch._foreach_norm": _NORM_WHY,
            "torch._foreach_mul_": _MUL_WHY, "torch._foreach_copy_": _COPY_WHY}
    return {k: v for k, v in whys.items() if v}


def fused_adamw_(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                 exp_avg_sqs: list[torch.Tensor], steps: list[torch.Tensor], *, lr: float,
                 beta1: float, beta2: float, weight_decay: float, eps: float) -> None:
    """torch's AdamW update in place (decoupled weight decay, no amsgrad, not maximising);
    ``steps``: each tensor's step count after this step, a float32 0-d tensor. Only where
    ``FUSED_ADAMW``: the caller runs its own single-tensor update otherwise."""
    if _adamw_kernel is None:
        raise RuntimeError(f"no fused AdamW kernel: {FUSED_ADAMW_WHY}")
    _adamw_kernel(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=lr, beta1=beta1,
                 beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=False, maximize=False)


def foreach_norm(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The L2 norm of each tensor (0-d tensors)."""
    if _norm_kernel is not None:
        return list(_norm_kernel(list(tensors)))
    return [torch.linalg.vector_norm(t) for t in tensors]


def foreach_mul_(tensors: Sequence[torch.Tensor], other: float | Sequence[torch.Tensor]) -> None:
    """Each tensor times ``other`` in place: one number for all, or one tensor each."""
    if _mul_kernel is not None:
        _mul_kernel(list(tensors), other if isinstance(other, float | int) else list(other))
    elif isinstance(other, float | int):
        for t in tensors:
            t.mul_(other)
    else:
        for t, o in zip(tensors, other, strict=True):
            t.mul_(o)


def foreach_copy_(dst: Sequence[torch.Tensor], src: Sequence[torch.Tensor]) -> None:
    """Each ``dst`` tensor takes the values of its ``src`` tensor, in place."""
    if _copy_kernel is not None:
        _copy_kernel(list(dst), list(src))
    else:
        for d, s in zip(dst, src, strict=True):
            d.copy_(s)


def optimizer_path() -> str:
    """One line: the AdamW update and the multi-tensor calls this process runs."""
    line = ("optimizer: fused AdamW (torch._fused_adamw_)" if FUSED_ADAMW else
            f"optimizer: single-tensor AdamW, slower ({FUSED_ADAMW_WHY})")
    others = {k: v for k, v in fallbacks().items() if k != "torch._fused_adamw_"}
    if others:
        line += "; public loops instead of " + "; ".join(others.values())
    return line


def autograd_in_graphs_why() -> str | None:
    """Why this torch cannot trace ``torch.autograd.grad`` into a compiled graph, or None."""
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    if config is None or not hasattr(config, "trace_autograd_ops"):
        return "this torch's Dynamo cannot trace torch.autograd.grad (no trace_autograd_ops)"
    if not hasattr(config, "recompile_limit"):
        return "this torch's Dynamo has no recompile_limit"
    return None


def allow_autograd_in_graphs(recompile_limit: int) -> None:
    """Let compiled functions trace ``torch.autograd.grad`` (the captured step's backward) and
    compile up to ``recompile_limit`` graphs of one function (a run's step structures), for the
    whole process. Only where ``autograd_in_graphs_why()`` is None."""
    config = torch._dynamo.config
    config.trace_autograd_ops = True
    config.recompile_limit = max(config.recompile_limit, recompile_limit)


_announced = False


def _print(line: str) -> None:
    print(line, flush=True)


def announce(say: Callable[[str], None] = _print) -> None:
    """Say ``optimizer_path()`` once per process (the first array a worker builds)."""
    global _announced
    if not _announced:
        _announced = True
        say(optimizer_path())


class KernelCount(TorchDispatchMode):
    """Counts the operators that compute, forward and backward (each a kernel launch on a GPU),
    inside ``with KernelCount(not_counted) as c:``; ``c.count`` after. ``not_counted``: operator
    names that compute nothing (views, metadata, allocations)."""

    def __init__(self, not_counted: frozenset[str]) -> None:
        super().__init__()
        self.not_counted, self.count = not_counted, 0

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in ``_disable_dynamo``, whose first call
        # imports torch._dynamo: ~3 s of the driver's pre-start check, before anything starts.
        # This mode never runs under torch.compile, so there is nothing for it to disable.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func.overloadpacket.__name__ not in self.not_counted:
            self.count += 1
        return func(*args, **(kwargs or {}))
