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
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

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
