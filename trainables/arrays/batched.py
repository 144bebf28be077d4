"""The members' heads and loss terms: one batched computation per method, not one per member.

Members that train the same method with settings of the same shape (equal switches, counts,
strings, and the same numbers at 0), on batches of the same kind and size, form a group. For the
step their heads' weights are stacked along a member axis, and the method's own pure functions
(``compute_objective``: heads, terms, the filter's share) run once for the whole group under
``torch.func.vmap``, forward and backward: the kernels a step launches stop growing with the
members of a method. Numeric settings that differ inside a group (lam, temperatures, margins,
thresholds) enter as tensors with a member axis; a setting that is 0 for one member and not for
another splits the group, since 0 switches a branch (a margin of 0 is plain InfoNCE).

Nothing mixes members: vmap computes each member's slice on its own rows, weights and settings,
so a member's terms are its terms alone (to float rounding: a batched matmul may add in another
order) and a NaN in one stays in its slice. Randomness comes from each member's own stream: the
row permutations a loss draws (``Needs.permutations``, DALR's ListMLE tie-break) are drawn ahead
from it, exactly as the loss would have drawn them (``trainables.objectives.core.PreDrawn``).

A group of one runs batched as well, so that a member computes the same way alone and in an
array (the two kernels of a batched and an unbatched matmul may round differently, and a dev
Spearman can turn on such a rounding). A method whose functions vmap cannot run (a plug-in that
branches on a tensor's value or draws from the generator without declaring it) runs the
per-member loop: the method's members then train one by one, as correct and slower. The pre-start
check tries the same vmap before anything trains (``method_check.try_batched``, through
:func:`vmapped_terms`), so the dry run and the driver's console say it first; the array keeps the
reason, whole (:func:`vmap_reason`), and its reports carry it to MLflow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.func import functional_call, vmap

from trainables.arrays import kernels
from trainables.arrays.teachers import teacher_inputs
from trainables.objectives import TeacherInputs, compute_objective, masked_fraction
from trainables.objectives.core import PreDrawn

if TYPE_CHECKING:
    from trainables.data.batches import Batch

# The trainer's types, by name only: trainables.arrays.trainer imports this module, and an
# import back (even under TYPE_CHECKING) would make a cycle (tests/test_imports.py).
ArrayTrainer = Any
Member = Any

Terms = dict[str, torch.Tensor]


def settings_shape(s: Any) -> tuple:
    """What must be equal for two members' settings to run as one vmapped computation: every
    field's value, except floats, of which only whether they are 0."""
    out = []
    for f in dataclasses.fields(s):
        v = getattr(s, f.name)
        out.append((f.name, ("float", v == 0) if isinstance(v, float) else v))
    return tuple(out)


def member_settings(members: Sequence[Member], device: torch.device) -> dict[str, torch.Tensor]:
    """The float settings on which a group's members differ, as (G,) fp32 tensors."""
    first = members[0].objective
    out = {}
    for f in dataclasses.fields(first):
        vals = [getattr(m.objective, f.name) for m in members]
        if isinstance(vals[0], float) and any(v != vals[0] for v in vals):
            out[f.name] = torch.tensor(vals, dtype=torch.float32, device=device)
    return out


def _rows(js: Sequence[int]) -> slice | list[int]:
    """Members ``js`` of the array's stacked outputs as a slice (a view) where they are evenly
    spaced (every member of a one-method array; every third of a mixed one), else a list."""
    if len(js) == 1:
        return slice(js[0], js[0] + 1)
    step = js[1] - js[0]
    if step > 0 and all(b - a == step for a, b in zip(js, js[1:], strict=False)):
        return slice(js[0], js[-1] + 1, step)
    return list(js)


def _stacked_leaf(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The members' copies of one head parameter stacked, as a leaf of its own whose gradient is
    handed to the members as views of it: no per-member gradient kernel (a stack's backward
    would copy each member's slice into its ``.grad``)."""
    stacked = torch.stack([p.detach() for p in params]).requires_grad_(params[0].requires_grad)
    if stacked.requires_grad:
        def hand_out(grad: torch.Tensor) -> None:
            # vmap's weight gradients can come transposed (strides of W^T); the optimizer's fused
            # kernel reads a gradient in its parameter's layout, so one copy here, per stacked
            # tensor, not per member
            grad = grad.contiguous()
            for p, g in zip(params, grad.unbind(0), strict=True):
                p.grad = g if p.grad is None else p.grad + g

        stacked.register_hook(hand_out)
    return stacked


def member_terms(template: torch.nn.Module, m0: Member, pair: bool) -> Callable[..., tuple]:
    """The function ``vmap`` runs over a group's members: one member's heads (``template`` with
    that member's weights and buffers) and its method's terms and filter share, on its slice of
    the group's inputs (``MethodGroups._group_inputs``), with its own float settings and the
    permutations drawn ahead from its stream. ``m0``: any member of the group (its method and the
    settings' shape, equal across the group); ``pair``: a caption batch."""
    s0, f0 = m0.objective, m0.filter

    def one(params, buffers, x):
        # an input the store or the method lacks (no CLIP text, no teachers) is absent from
        # ``x``, not None: vmap maps tensors only
        out = functional_call(template, (params, buffers), (x["cls"], x["z"], x["mask"]),
                              {"image": x.get("image"), "clip_text": x.get("clip_text")})
        s = dataclasses.replace(s0, **x["settings"]) if x.get("settings") else s0
        teacher = None
        if pair:
            teacher = TeacherInputs(image=x.get("image"), clip_text=x.get("clip_text"),
                                    text_teachers=x.get("embs", ()),
                                    text_teacher_local=x.get("local", ()))
        terms = compute_objective(s, out, teacher, generator=PreDrawn(x.get("perms")))
        frac = {}
        if teacher is not None and f0 is not None:
            f = m0.method.negative_filter(s)
            frac["masked"] = masked_fraction(x["image"], x["clip_text"], f.threshold, f.on)
        return terms, frac

    return one


def vmapped_terms(heads: Sequence[torch.nn.Module], m0: Member, pair: bool,
                  inputs: dict[str, Any]) -> tuple[Terms, dict[str, torch.Tensor],
                                                   dict[str, torch.Tensor]]:
    """A group's terms under ``vmap``: the members' ``heads`` (one ``MethodHeads`` each) stacked,
    :func:`member_terms` run once over them. -> (terms, filter shares, the stacked buffers,
    whose updated running statistics the caller copies back). The array's step and the pre-start
    check (``method_check.try_batched``) both run a method this way."""
    template = heads[0]
    params = {k: _stacked_leaf([dict(hd.named_parameters())[k] for hd in heads])
              for k, _ in template.named_parameters()}
    buffers = {k: torch.stack([dict(hd.named_buffers())[k] for hd in heads])
               for k, _ in template.named_buffers()}
    terms, frac = vmap(member_terms(template, m0, pair))(params, buffers, inputs)
    return terms, frac, buffers


def vmap_reason(e: BaseException) -> str:
    """Why vmap could not run a method, whole, on one line, with the line of the method's own
    file that did it (the innermost frame outside torch and mmemb)."""
    import traceback

    from trainables.runtime.command_line import one_line

    ours = str(Path(__file__).resolve().parents[1])
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith((ours, str(Path(torch.__file__).parent), "<"))]
    where = f" (at {Path(frames[-1].filename).name} line {frames[-1].lineno}: " \
            f"{(frames[-1].line or '').strip()})" if frames else ""
    return f"{type(e).__name__}: {' '.join(one_line(e).split())}{where}"


class MethodGroups:
    """Computes every alive member's loss terms, a group of members of one method at a time."""

    def __init__(self, trainer: ArrayTrainer):
        self.tr = trainer
        self.looped: dict[str, str] = {}
        """method -> why its members run one by one (vmap failed on its functions)"""
        self._settings: dict[tuple[str, ...], dict[str, torch.Tensor]] = {}
        self.errors: dict[int, str] = {}
        """this step's members (index among the alive) whose heads or loss raised -> why"""

    # --- grouping -------------------------------------------------------------------------
    def _key(self, m: Member, kind: str, b: Batch, computed: bool) -> tuple:
        feats = tuple(None if x is None else (tuple(x.shape[1:]), x.dtype)
                      for x in (b.image, b.clip_text, *b.text_teachers))
        heads = self.tr.student_configs[self.tr.members.index(m)].heads
        return (m.method.name, kind, b.input_ids.shape[0], settings_shape(m.objective), m.needs,
                heads, feats, len(b.text_teachers), computed)

    def terms(self, batches: list[tuple[str, Batch]], cls: torch.Tensor, z: torch.Tensor,
              mask: torch.Tensor, teach: dict[int, tuple[tuple, tuple]], poisoned: set[str],
              ) -> tuple[list[Terms], dict[int, torch.Tensor], torch.Tensor]:
        """Each member's terms, the filtered share of each member whose filter saw a caption
        batch, and the sum of every member's total (what the step differentiates).

        ``cls``, ``z``: (M, 2 rows, H), rows 2i and 2i+1 the two views of sentence i; ``mask``:
        (M, rows, L), every member's attention mask padded to the array's."""
        alive = self.tr.alive
        self.errors = {}
        groups: dict[tuple, list[int]] = {}
        for j, (m, (kind, b)) in enumerate(zip(alive, batches, strict=True)):
            groups.setdefault(self._key(m, kind, b, j in teach), []).append(j)
        all_terms: list[Terms | None] = [None] * len(alive)
        masked: dict[int, torch.Tensor] = {}
        totals = []
        for js in groups.values():
            name = alive[js[0]].method.name
            out = None
            if name not in self.looped:
                out = self._batched(js, batches, cls, z, mask, teach, poisoned)
            if out is None:
                for j in js:
                    terms, frac = self._one_alone(j, batches[j], cls, z, teach.get(j), poisoned)
                    all_terms[j] = terms
                    if frac is not None:
                        masked[j] = frac
                    totals.append(terms["total"])
                continue
            stacked, fracs = out
            for i, j in enumerate(js):
                all_terms[j] = {k: v[i] for k, v in stacked.items()}
                if fracs is not None:
                    masked[j] = fracs[i]
            totals.append(stacked["total"].sum())
        total = totals[0] if len(totals) == 1 else torch.stack(totals).sum()
        return all_terms, masked, total  # type: ignore[return-value]

    # --- one member -----------------------------------------------------------------------
    def _one_alone(self, j: int, kb: tuple[str, Batch], cls: torch.Tensor, z: torch.Tensor,
                   computed, poisoned: set[str]) -> tuple[Terms, torch.Tensor | None]:
        """``_one``, where a member whose heads or loss raise fails alone: its reason goes to
        the finite check (``finite_check.py``) and its terms are a NaN mark, so every worker drops it."""
        try:
            return self._one(j, kb, cls, z, computed, poisoned)
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:  # a head or loss of this member's method
            from trainables.runtime.command_line import one_line

            m, (kind, b) = self.tr.alive[j], kb
            n = b.input_ids.shape[0]
            self.errors[j] = (f"failed at step {self.tr.step + 1} in method "
                                       f"{m.method.name!r} ({kind} batch of {n}): "
                                       f"{type(e).__name__}: {one_line(e)}")
            # no gradient for it; the same masked entries on every worker
            frac = z.new_zeros(()) if kind == "pair" and m.filter is not None else None
            return {"total": z[j].sum() * 0.0, "error": z.new_tensor(math.nan)}, frac

    def _one(self, j: int, kb: tuple[str, Batch], cls: torch.Tensor, z: torch.Tensor,
             computed, poisoned: set[str]) -> tuple[Terms, torch.Tensor | None]:
        m, (kind, b) = self.tr.alive[j], kb
        n = b.input_ids.shape[0]
        out = self.tr.model.heads[j].heads_outputs(
            cls[j, : 2 * n].view(n, 2, -1), z[j, : 2 * n].view(n, 2, -1), b.attention_mask,
            image=b.image if kind == "pair" else None, clip_text=b.clip_text)
        teacher = teacher_inputs(m, b, computed) if kind == "pair" else None
        terms = compute_objective(m.objective, out, teacher, generator=m.method_rng)
        f, frac = m.filter, None
        if teacher is not None and f is not None:
            frac = masked_fraction(b.image, b.clip_text, f.threshold, f.on)
        if m.record.config_hash in poisoned:
            terms["total"] = terms["total"] * float("nan")
        return terms, frac

    # --- a group --------------------------------------------------------------------------
    def _batched(self, js: list[int], batches: list[tuple[str, Batch]], cls: torch.Tensor,
                 z: torch.Tensor, mask: torch.Tensor, teach: dict[int, tuple[tuple, tuple]],
                 poisoned: set[str]) -> tuple[Terms, torch.Tensor | None] | None:
        """The group's terms as (G,) tensors, or None when vmap cannot run its method."""
        tr, alive = self.tr, self.tr.alive
        members = [alive[j] for j in js]
        m0, (kind, b0) = members[0], batches[js[0]]
        pair = kind == "pair"
        n = b0.input_ids.shape[0]
        g = len(js)
        inputs = self._group_inputs(js, batches, cls, z, mask, teach)
        draws = m0.needs.permutations if pair else 0
        states = [m.method_rng.get_state() for m in members] if draws else []
        if draws:  # as the loss would draw them: randperm(n) from the member's own stream
            perms = torch.stack([
                torch.stack([torch.randperm(n, generator=m.method_rng, device=m.method_rng.device)
                             for _ in range(draws)]) for m in members])
            if perms.device.type == "cpu" and cls.device.type == "cuda":
                perms = perms.pin_memory()  # an asynchronous copy: the host does not wait
            inputs["perms"] = perms.to(cls.device, non_blocking=True)
        heads = [tr.model.heads[j] for j in js]
        try:
            terms, frac, buffers = vmapped_terms(heads, m0, pair, inputs)
            fracs = frac.get("masked")
        except Exception as e:  # noqa: BLE001 - any failure: the method's members run one by one
            for m, st in zip(members, states, strict=False):
                m.method_rng.set_state(st)  # undraw: the loop draws the same permutations
            name = m0.method.name
            self.looped[name] = vmap_reason(e)  # the array's reports carry it to the driver
            if tr.rank == 0:
                print(f"method {name!r}: one by one: {self.looped[name]}", flush=True)
            return None
        if buffers:  # BatchNorm's running statistics, updated in the stacked copies
            for k, stacked in buffers.items():
                kernels.foreach_copy_([dict(hd.named_buffers())[k] for hd in heads],
                                      list(stacked.unbind(0)))
        bad = [i for i, m in enumerate(members) if m.record.config_hash in poisoned]
        if bad:
            poison = torch.ones(g, device=cls.device)
            poison[bad] = float("nan")
            terms["total"] = terms["total"] * poison
        return terms, fracs

    def _group_inputs(self, js: list[int], batches: list[tuple[str, Batch]], cls: torch.Tensor,
                      z: torch.Tensor, mask: torch.Tensor,
                      teach: dict[int, tuple[tuple, tuple]]) -> dict[str, Any]:
        """What ``member_terms`` reads, stacked over the group's members ``js``: their rows of
        the student's outputs and mask, their caption batch's features and teachers' outputs,
        and the float settings on which they differ."""
        members = [self.tr.alive[j] for j in js]
        m0, (kind, b0) = members[0], batches[js[0]]
        n = b0.input_ids.shape[0]
        g = len(js)
        rows = _rows(js)
        h = cls.shape[-1]
        length = max(batches[j][1].attention_mask.shape[1] for j in js)
        inputs: dict[str, Any] = {
            "cls": cls[rows, : 2 * n].reshape(g, n, 2, h),
            "z": z[rows, : 2 * n].reshape(g, n, 2, h),
            "mask": mask[rows, :n, :length],
        }
        if kind == "pair":
            # A feature the store lacks (MCSE's ResNet store has no CLIP text) is left out, not
            # passed as None: vmap rejects a None it is asked to map, and the whole method would
            # then run one member at a time. Every member of a group reads the same store
            # columns (``_key``), so the first batch says what the group has.
            for name in ("image", "clip_text"):
                if getattr(b0, name) is not None:
                    inputs[name] = torch.stack([getattr(batches[j][1], name) for j in js])
            if js[0] in teach:  # the teachers' forward, each member's rows of it
                embs = [teach[j][0] for j in js]
                inputs["embs"] = tuple(torch.stack(e) for e in zip(*embs, strict=True))
                if m0.needs.teacher_tokens:
                    inputs["local"] = self._local([teach[j][1] for j in js], length)
            elif b0.text_teachers:
                inputs["embs"] = tuple(torch.stack(e) for e in zip(
                    *(batches[j][1].text_teachers for j in js), strict=True))
        settings = self.settings_of(js)
        if settings:  # the float settings the members differ on, if any
            inputs["settings"] = settings
        return inputs

    def settings_of(self, js: Sequence[int]) -> dict[str, torch.Tensor]:
        """The float settings on which the alive members ``js`` differ (``member_settings``),
        made once per set of members (a captured step makes them before its graph runs)."""
        members = [self.tr.alive[j] for j in js]
        key = tuple(m.key for m in members)
        if key not in self._settings:
            self._settings[key] = member_settings(members, self.tr.device)
        return self._settings[key]

    @staticmethod
    def _local(locals_: list[tuple[torch.Tensor, ...]], length: int) -> tuple[torch.Tensor, ...]:
        """Each teacher's token states of the group's members, (G, n, length - 1, d): a member's
        own columns (its batch's length - 1), zeros after them. Zeros leave its global-local term
        as it is: they add nothing to the token-axis norm, and its mask hides them."""
        out = []
        for per_member in zip(*locals_, strict=True):
            out.append(torch.stack([
                x if x.shape[1] == length - 1 else torch.nn.functional.pad(x, (0, 0, 0, length - 1 - x.shape[1]))
                for x in per_member]))
        return tuple(out)
