"""One forward and backward of a method's heads and loss terms on a tiny random batch at a run's
real sizes, before anything trains.

A plug-in method whose head does not fit its loss (a 7-wide head multiplied with the 384-wide
embedding) otherwise fails after hours of other runs, with torch's bare ``size of tensor a (7)
must match ...``. The pre-start check (``orchestrator.run.preflight``) calls :func:`try_method`
once per distinct objective and data sizes, so the refusal names the method, its heads and the
sizes while nothing has started. Random inputs: this checks shapes, dtypes and that the terms
reach a scalar total with a gradient, not the values.

Why here, in ``arrays/``: the methods it checks are the registry's (``trainables.objectives``)
with the heads they declare (``trainables.models.heads``), and a method trains in an array as
one batched computation of those heads and losses under ``torch.func.vmap``
(``batched.member_terms``). ``arrays`` is the lowest layer that may import all three
(tests/test_layers.py), so this check can also try a method the way the array will run it, beside
the code that does.

:func:`try_batched` is that second check: the method's heads and loss for a group of two
members under the array's own vmap (``batched.vmapped_terms``), with the float settings on which
the campaign's members differ as tensors, as the array passes them. Its verdict, ``batched`` or
``one by one: <why>``, and what it costs (kernels a step, counted once) are what the dry run
prints and the real run says on the driver's console before anything trains.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from trainables.arrays import kernels
from trainables.config.run_config import RunConfig

ROWS, LENGTH = 4, 8
"""the tiny batch: sentences (each in two dropout views) and tokens"""


def try_method(cfg: RunConfig, hidden: int, image_dim: int | None, clip_text_dim: int | None,
               teacher_dims: Sequence[int] = ()) -> None:
    """Build ``cfg``'s method heads and run one text batch and (when the method trains on
    captions) one caption batch through heads, loss and backward. Raises ValueError in one line
    naming the method, its heads and the sizes."""
    from trainables.models.heads import RESERVED, MethodHeads
    from trainables.objectives import TeacherInputs, compute_objective
    from trainables.objectives.methods import HeadDims, method_of, resolve_heads

    method = method_of(cfg.objective)
    needs = method.needs(cfg.objective)
    clip = clip_text_dim if needs.clip_text else None
    dims = HeadDims(hidden, cfg.proj_dim, image_dim, clip)
    sizes = (f"hidden {hidden}, proj_dim {cfg.proj_dim}, image {image_dim}, clip_text "
             f"{clip_text_dim}" + (f", text teachers {list(teacher_dims)}" if teacher_dims else ""))
    heads = resolve_heads(method.heads(cfg.objective, dims), dims, RESERVED)
    shown = ", ".join(f"{n} ({h.kind} {h.input} {h.in_dim}->{h.out_dim})" for n, h in heads) or "none"
    kinds = ("text", "caption") if cfg.needs.captions else ("text",)
    kind = kinds[0]
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            module = MethodHeads(heads).train()
            for kind in kinds:
                cls = torch.randn(ROWS, 2, hidden, requires_grad=True)
                z = torch.tanh(cls)
                mask = torch.ones(ROWS, LENGTH, dtype=torch.long)
                pair = kind == "caption"
                image = torch.randn(ROWS, image_dim) if pair and image_dim else None
                clip_text = torch.randn(ROWS, clip_text_dim) if pair and clip_text_dim else None
                out = module.heads_outputs(cls, z, mask, image=image, clip_text=clip_text)
                teacher = None
                if pair:
                    embs = tuple(torch.randn(ROWS, d) for d in teacher_dims) if needs.text_teachers else ()
                    local = (tuple(torch.randn(ROWS, LENGTH - 1, d) for d in teacher_dims)
                             if needs.teacher_tokens else ())
                    teacher = TeacherInputs(image=image, clip_text=clip_text, text_teachers=embs,
                                            text_teacher_local=local)
                terms = compute_objective(cfg.objective, out, teacher,
                                          generator=torch.Generator().manual_seed(0))
                total = terms["total"]
                if total.dim() != 0 or not total.requires_grad:
                    raise ValueError(f"its 'total' term must be a scalar with a gradient, got shape "
                                     f"{tuple(total.shape)}, requires_grad={total.requires_grad}")
                total.backward()
    except Exception as e:
        from trainables.runtime.command_line import one_line

        raise ValueError(
            f"method {method.name!r} fails one {kind} batch at this run's sizes (heads: {shown}; "
            f"{sizes}): {type(e).__name__}: {one_line(e)}; fix the method's heads or loss "
            "(docs/methods.md), nothing has trained") from None


NO_KERNEL = frozenset((
    "view", "_unsafe_view", "reshape", "_reshape_alias", "view_as", "slice", "select", "narrow",
    "transpose", "t", "permute", "unsqueeze", "squeeze", "expand", "expand_as", "as_strided",
    "alias", "detach", "lift_fresh", "unbind", "split", "split_with_sizes", "chunk", "unflatten",
    "flatten", "diagonal", "empty", "empty_like", "empty_strided", "new_empty", "to",
    "contiguous", "resolve_conj", "resolve_neg", "size", "stride", "numel", "dim",
    "_to_copy_if_same", "is_same_size", "_local_scalar_dense"))
"""operators that compute nothing (views, metadata, allocations): not counted as kernels, as
``bench/launch_count.py`` counts a step"""


@dataclass(frozen=True)
class BatchedCheck:
    """Whether a method's members run as one batched computation, and what that costs."""

    method: str
    reason: str | None
    """None: batched; else why vmap cannot run the method's heads and loss, whole"""
    kernels: int
    """batched: the kernels of its heads and loss for a whole group a step (any number of
    members); one by one: the kernels each member adds a step"""
    hidden: int
    extra: int = 0
    """batched: the kernels a third member adds to a group of two (0: vmap batches them all)"""

    @property
    def batched(self) -> bool:
        return self.reason is None

    def line(self) -> str:
        """What the dry run and the driver's console say of the method."""
        if self.batched:
            more = ("whatever the number of members" if not self.extra else
                    f"+{self.extra} per extra member")
            return (f"method {self.method}: batched: its heads and loss run once a step for all "
                    f"its members of an array ({self.kernels} kernels a step at hidden "
                    f"{self.hidden}, {more})")
        return (f"method {self.method}: one by one: {self.reason}; each member of it adds "
                f"{self.kernels} kernels a step (its heads and loss at hidden {self.hidden}, run "
                "once per member instead of once for all); the numbers are the same, only slower "
                "(docs/methods.md: what keeps a loss batchable)")


def try_batched(cfg: RunConfig, hidden: int, image_dim: int | None, clip_text_dim: int | None,
                teacher_dims: Sequence[int] = (), differing: Iterable[str] = ()) -> BatchedCheck:
    """Run ``cfg``'s method heads and loss for a group of two members under the array's vmap
    (``batched.vmapped_terms``), on a text and (when it trains on captions) a caption batch, at
    the run's sizes; the float settings named in ``differing`` (those on which the campaign's
    members of this method differ) reach the loss as (2,) tensors, as in the array. Counts the
    kernels once: a batched group's, or what one member costs alone when vmap cannot run it."""
    from trainables.arrays.batched import vmap_reason, vmapped_terms
    from trainables.models.heads import RESERVED, MethodHeads
    from trainables.objectives import TeacherInputs, compute_objective
    from trainables.objectives.methods import HeadDims, method_of, resolve_heads

    s = cfg.objective
    method = method_of(s)
    needs = method.needs(s)
    clip = clip_text_dim if needs.clip_text else None
    dims = HeadDims(hidden, cfg.proj_dim, image_dim, clip)
    heads = resolve_heads(method.heads(s, dims), dims, RESERVED)
    member = SimpleNamespace(objective=s, method=method, filter=method.negative_filter(s))
    floats = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)}
    varied = [k for k, v in floats.items()
              if k in set(differing) and isinstance(v, float) and v != 0]
    kinds = ("text", "caption") if needs.captions else ("text",)

    def batch(kind: str, g: int) -> dict:
        pair = kind == "caption"
        x = {"cls": torch.randn(g, ROWS, 2, hidden), "mask": torch.ones(g, ROWS, LENGTH,
                                                                          dtype=torch.long),
             "settings": {k: torch.tensor([floats[k] * (1 + i / 4) for i in range(g)])
                          for k in varied} if g > 1 else {}}
        x["cls"].requires_grad_(True)
        x["z"] = torch.tanh(x["cls"])
        if pair:
            x["image"] = torch.randn(g, ROWS, image_dim) if image_dim else None
            if clip_text_dim:
                x["clip_text"] = torch.randn(g, ROWS, clip_text_dim)
            x["embs"] = tuple(torch.randn(g, ROWS, d) for d in teacher_dims) \
                if needs.text_teachers else ()
            if needs.teacher_tokens:
                x["local"] = tuple(torch.randn(g, ROWS, LENGTH - 1, d) for d in teacher_dims)
            if needs.permutations:
                x["perms"] = torch.stack([torch.stack([torch.randperm(ROWS) for _ in
                                                       range(needs.permutations)])
                                          for _ in range(g)])
        return x

    def group(g: int) -> int:
        counter = kernels.KernelCount(NO_KERNEL)
        modules = [MethodHeads(heads).train() for _ in range(g)]
        for kind in kinds:
            x = batch(kind, g)
            with counter:
                terms, _, _ = vmapped_terms(modules, member, kind == "caption", x)
                terms["total"].sum().backward()
        return counter.count

    def alone() -> int:
        counter = kernels.KernelCount(NO_KERNEL)
        module = MethodHeads(heads).train()
        for kind in kinds:
            x = {k: v[0] if isinstance(v, torch.Tensor) else v for k, v in batch(kind, 1).items()}
            with counter:
                pair = kind == "caption"
                out = module.heads_outputs(x["cls"], x["z"], x["mask"],
                                           image=x.get("image") if pair else None,
                                           clip_text=x.get("clip_text"))
                teacher = None
                if pair:
                    teacher = TeacherInputs(
                        image=x["image"], clip_text=x.get("clip_text"),
                        text_teachers=tuple(e[0] for e in x.get("embs", ())),
                        text_teacher_local=tuple(t[0] for t in x.get("local", ())))
                terms = compute_objective(s, out, teacher, generator=torch.Generator().manual_seed(0))
                terms["total"].backward()
        return counter.count

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            two, three = group(2), group(3)
        except Exception as e:  # noqa: BLE001 - whatever vmap refuses: the members run one by one
            return BatchedCheck(method.name, vmap_reason(e), alone(), hidden)
    return BatchedCheck(method.name, None, two, hidden, max(0, three - two))
