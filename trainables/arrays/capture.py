"""A captured step (``RunConfig.compile``): the array's step through ``torch.compile`` and, on
CUDA, CUDA graphs.

- ``default``: ``torch.compile`` (Inductor) of the stacked encoder's forward once its dropout masks
  are drawn (``StackedEncoder.encode``): pure tensor code over fixed parameters, where nearly all
  of a step's FLOPs are. Shapes may change from step to step (a batch's longest sentence), which
  costs a recompilation per new shape until Dynamo marks them dynamic.
- ``graphs``: **the whole step** (:class:`WholeStep`): the stacked forward, the teachers, every
  method's batched heads and loss terms, the backward, the device half of the finite check, the
  clip and the AdamW update of every member, as one function compiled with
  ``mode="reduce-overhead"``: on CUDA one CUDA graph replay a step, plus the one read-back of the
  finite check. The trainer pads every step's batches to batch_size x max_length so that a step
  has one shape. On a CPU there are no CUDA graphs: it compiles at that one shape.

What stays outside the captured region, and why:

- each member's dropout masks and its method's permutations (DALR's ListMLE tie-break) are drawn
  eagerly, from the member's own generators, so a member's random streams, and with them its
  numbers, are what the eager step gives (to the rounding of fused kernels): three kernels a
  member for dropout;
- the batches (each member's own data order), their padding, and the host's bookkeeping;
- the finite check's read-back and its verdicts. Its semantics are the eager step's: a member
  whose loss turns NaN/inf (or whose filter masked every negative ``FULLY_MASKED_STOP`` times in a
  row) leaves before its weights change: the captured update leaves that member's weights as
  they were (a per-member ``where`` on the device flags), then the host drops it;
- the official optimiser's per-parameter step counts, kept on the host (``ArrayAdamW.captured_plan``)
  and handed to the update as one vector a step, not as Python numbers a graph would bake in.

A step runs eagerly, with the encoder alone captured, the first time its structure is seen (the
batch kinds, the members and their groups: that step tells which tensors the backward reaches,
and warms up what CUDA graphs need), while a fault is injected, on a multi-worker array (its
gradients are all-reduced between backward and update) and for as long as a method of the step
runs its members one by one (``batched.py``'s fallback: vmap cannot run it). The last two are said
once. The eager step stays the default (``compile=off``) until GPU figures (bench/gpu_suite.py)
show a captured one both faster and exact; on a CPU the captured step equals the eager one to
float rounding (tests/trainables/arrays/test_capture.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
from torch.func import vmap

from trainables.arrays import kernels, teachers
from trainables.arrays.batched import member_terms
from trainables.arrays.dropout import DropMasks
from trainables.arrays.encoder import StackedEncoder
from trainables.arrays.finite_check import FULLY_MASKED_STOP
from trainables.data.batches import Batch

# The trainer's type, by name only: the trainer imports this module (an import back, even under
# TYPE_CHECKING, would make a cycle: tests/test_imports.py).
ArrayTrainer = Any

MODES = ("off", "default", "graphs")
BACKEND = "inductor"
"""torch.compile's backend (the CPU tests use "aot_eager": the same capture, no code generation)"""
RECOMPILE_LIMIT = 64
"""structures of a step (batch kinds, short last batches, members leaving) a run may compile"""


def capture(encoder: torch.nn.Module, mode: str, device: torch.device) -> str | None:
    """Compile ``encoder``'s ``encode`` in place for ``mode``; returns a line saying what was not
    captured (a looped encoder: one Hugging Face model per member), else None."""
    if mode not in MODES:
        raise ValueError(f"compile={mode!r}; use one of {MODES}")
    if mode == "off":
        return None
    if not isinstance(encoder, StackedEncoder):
        return (f"compile={mode}: the looped encoder ({type(encoder).__name__}) runs eagerly; "
                "only the stacked encoder is captured")
    how = "reduce-overhead" if mode == "graphs" and device.type == "cuda" else "default"
    kw = {"mode": how} if BACKEND == "inductor" else {}
    encoder.encode = torch.compile(encoder.encode, backend=BACKEND, **kw)  # instance attribute: the module
    return None                                              # and its state_dict are unchanged


class WholeStep:
    """``compile=graphs``: the step from the stacked forward to the update as one captured function
    (module docstring). ``ArrayTrainer.train_step`` asks ``ready`` at every step, runs ``run``
    where it may, and otherwise runs its eager step and hands its structure to ``learn``."""

    def __init__(self, trainer: ArrayTrainer):
        self.tr = trainer
        self._learnt: dict[tuple, tuple] = {}
        """structure -> (the gradients its backward reaches, each member's term names, the
        members whose filter share is read), from the structure's first (eager) step"""
        self._said: set[str] = set()
        self._pad = trainer.tokenizer.pad_token_id or 0  # read outside the graph: a tokenizer is no tensor code
        self.captured_steps = 0
        """steps that ran as the captured function (for the benchmarks and tests)"""
        kernels.allow_autograd_in_graphs(RECOMPILE_LIMIT)
        how = "reduce-overhead" if trainer.device.type == "cuda" else "default"
        kw = {"mode": how} if BACKEND == "inductor" else {}
        self._fn = torch.compile(self._body, backend=BACKEND, fullgraph=True, dynamic=False, **kw)

    # --- on the host -----------------------------------------------------------------------
    def structure(self, batches: list[tuple[str, Batch]]) -> tuple:
        """What a captured graph is specialised to: the members, their batches' kinds and sizes
        and how their heads and losses group (``MethodGroups``)."""
        tr = self.tr
        computed = self._computed(batches)
        groups: dict[tuple, list[int]] = {}
        for j, (m, (kind, b)) in enumerate(zip(tr.alive, batches, strict=True)):
            groups.setdefault(tr.objectives._key(m, kind, b, j in computed), []).append(j)
        return (tuple(m.key for m in tr.alive), tuple(k for k, _ in batches),
                tuple(tuple(b.input_ids.shape) for _, b in batches),
                tuple(tuple(js) for js in groups.values()))

    def _computed(self, batches: list[tuple[str, Batch]]) -> set[int]:
        """The members whose teachers run this step (``teachers.teacher_outputs``'s rule)."""
        return {j for j, (m, (kind, b)) in enumerate(zip(self.tr.alive, batches, strict=True))
                if kind == "pair" and m.teachers is not None and not b.text_teachers}

    def ready(self, key: tuple, poisoned: set[str]) -> bool:
        """Whether this step may run captured (module docstring: when it may not)."""
        tr = self.tr
        if tr.world > 1:
            self._say("world", "compile=graphs: a multi-worker array all-reduces its gradients "
                      "between backward and update, so its heads, losses and optimiser run outside "
                      "the captured region (the encoder alone is captured)")
            return False
        looped = sorted({tr.alive[js[0]].method.name for js in key[3]} & set(tr.objectives.looped))
        if looped:
            self._say(f"looped:{looped}", f"compile=graphs: method {', '.join(map(repr, looped))} runs "
                      "its members one by one (torch.func.vmap cannot run it), so the steps it is "
                      "in run their heads, losses and optimiser outside the captured region")
            return False
        return key in self._learnt and not poisoned

    def learn(self, key: tuple, all_terms: list[dict[str, torch.Tensor]],
              masked: dict[int, torch.Tensor], errors: dict[int, str]) -> None:
        """After the eager step of a new structure, before its update: what its backward reached
        and the names of its terms (a step where a member's heads raised teaches nothing)."""
        if errors or key in self._learnt or self.tr.world > 1:
            return
        names = tuple(tuple(t) for t in all_terms)
        self._learnt[key] = (self.tr.optimizer.reached(), names, tuple(sorted(masked)))

    def _say(self, what: str, line: str) -> None:
        if what not in self._said:
            self._said.add(what)
            if self.tr.rank == 0:
                print(line, flush=True)

    def run(self, key: tuple, batches: list[tuple[str, Batch]], ids: torch.Tensor,
            mask: torch.Tensor, mask1: torch.Tensor, extents: tuple[list[int], list[int]],
            step: int) -> tuple[list[dict[str, torch.Tensor]], dict[int, str]]:
        """One captured step: -> (each member's terms, the members to drop and why)."""
        tr = self.tr
        reached, names, masked_js = self._learnt[key]
        enc = tr.model.encoder
        masks = enc._draw([m.dropout for m in tr.alive], mask, ids.shape[1], ids.shape[2], ids.device,
                          extents)
        perms = self._permutations(key, batches, ids.device)
        for js in key[3]:  # the float settings a group's members differ on, made outside the graph
            tr.objectives.settings_of(list(js))
        layout, numbers = tr.optimizer.captured_plan(reached)
        runs = [float(tr.alive[j].record.fully_masked_run) for j in masked_js]
        vec = torch.tensor(numbers + runs, dtype=torch.float32)
        if ids.device.type == "cuda":
            vec = vec.pin_memory()  # an asynchronous copy: the host does not wait
        vec = vec.to(ids.device, non_blocking=True)
        per_member = tuple(_member_tensors(b) for _, b in batches)
        spec = (key, layout, names, masked_js, len(numbers),
                (masks.hidden_scale, masks.attention_scale))
        back = self._fn(spec, ids, mask, mask1, masks.hidden, masks.attention, per_member, perms, vec)
        back = back.clone()  # a CUDA graph's output is overwritten by its next replay
        self.captured_steps += 1
        m = len(tr.alive)
        values = back.tolist()  # the step's one read-back
        bad = tr.finite.reasons(values, tr.alive, [list(ks) for ks in names], list(masked_js), {}, step)
        terms, pos = [], m + len(masked_js)
        for ks in names:
            terms.append({k: back[pos + i] for i, k in enumerate(ks)})
            pos += len(ks)
        return terms, bad

    def _permutations(self, key: tuple, batches: list[tuple[str, Batch]],
                      device: torch.device) -> tuple[torch.Tensor | None, ...]:
        """Per group, the row permutations its loss draws, from each member's own stream, as the
        eager step draws them (``batched.py``); None where the group draws none."""
        out = []
        for js in key[3]:
            members = [self.tr.alive[j] for j in js]
            kind, b0 = batches[js[0]]
            draws = members[0].needs.permutations if kind == "pair" else 0
            if not draws:
                out.append(None)
                continue
            n = b0.input_ids.shape[0]
            perms = torch.stack([
                torch.stack([torch.randperm(n, generator=m.method_rng, device=m.method_rng.device)
                             for _ in range(draws)]) for m in members])
            if perms.device.type == "cpu" and device.type == "cuda":
                perms = perms.pin_memory()
            out.append(perms.to(device, non_blocking=True))
        return tuple(out)

    # --- the captured function ------------------------------------------------------------------
    def _body(self, spec: tuple, ids: torch.Tensor, mask: torch.Tensor, mask1: torch.Tensor,
              hidden: torch.Tensor | None, attention: torch.Tensor | None,
              per_member: tuple[dict[str, Any], ...], perms: tuple[torch.Tensor | None, ...],
              vec: torch.Tensor) -> torch.Tensor:
        """The step as pure tensor code: what ``_fn`` compiles. ``spec`` is constant while the
        step's structure is (Dynamo specialises the graph to it); everything that changes from
        step to step is a tensor. Returns the finite check's vector (``FiniteCheck.read_back``'s
        layout)."""
        key, layout, names, masked_js, n_numbers, scales = spec
        tr = self.tr
        kinds, groups = key[1], key[3]
        batches = [(k, Batch(k, x["ids"], x["mask"], image=x.get("image"),
                             clip_text=x.get("clip_text"), text_teachers=x.get("teachers", ())))
                   for k, x in zip(kinds, per_member, strict=True)]
        pad = self._pad
        autocast = (torch.autocast(ids.device.type, dtype=torch.bfloat16) if tr.amp
                    else contextlib.nullcontext())
        heads_st: list[list[torch.nn.Module]] = []
        buffers_st: list[dict[str, torch.Tensor]] = []
        with autocast:
            cls = tr.model.encoder.encode(ids, mask, DropMasks(hidden, attention, *scales))[:, :, 0]
            z = tr.model.mlp(cls)
            teach = teachers.teacher_outputs(tr.alive, batches, pad)
            all_terms: list[dict[str, torch.Tensor]] = [{} for _ in tr.alive]
            shares: dict[int, torch.Tensor] = {}
            totals = []
            for js, p in zip(groups, perms, strict=True):
                js = list(js)
                inputs = tr.objectives._group_inputs(js, batches, cls, z, mask1, teach)
                if p is not None:
                    inputs["perms"] = p
                heads = [tr.model.heads[j] for j in js]
                template = heads[0]
                # a plain stack: the step's own autograd.grad hands each member its slice
                params = {k: torch.stack([dict(h.named_parameters())[k] for h in heads])
                          for k, _ in template.named_parameters()}
                buffers = {k: torch.stack([dict(h.named_buffers())[k] for h in heads])
                           for k, _ in template.named_buffers()}
                m0 = tr.alive[js[0]]
                terms, frac = vmap(member_terms(template, m0, kinds[js[0]] == "pair"))(params, buffers, inputs)
                heads_st.append(heads)
                buffers_st.append(buffers)
                for i, j in enumerate(js):
                    all_terms[j] = {k: v[i] for k, v in terms.items()}
                    if "masked" in frac:
                        shares[j] = frac["masked"][i]
                totals.append(terms["total"].sum())
            total = totals[0] if len(totals) == 1 else torch.stack(totals).sum()
        stacked = tr.optimizer.stacked
        own = tr.optimizer.own
        grads = torch.autograd.grad(total, [*stacked, *(p for ps in own for p in ps)], allow_unused=True)
        grads_st, rest = list(grads[: len(stacked)]), list(grads[len(stacked):])
        grads_own = []
        for ps in own:
            grads_own.append(rest[: len(ps)])
            rest = rest[len(ps):]
        with torch.no_grad():
            for heads, buffers in zip(heads_st, buffers_st, strict=True):
                for k, st in buffers.items():  # BatchNorm's running statistics, as the eager step
                    kernels.foreach_copy_([dict(h.named_buffers())[k] for h in heads], list(st.unbind(0)))
            # the finite check's device half (FiniteCheck.read_back's vector), and its verdict on
            # the device: which members may update
            values = [torch.stack([all_terms[j][k].detach().float() for k in ks])
                      for j, ks in enumerate(names)]
            bad = torch.stack([~torch.isfinite(v).all() for v in values])
            share = ([shares[j].detach().float() for j in masked_js])
            stop = torch.zeros_like(bad)
            if masked_js:
                runs = vec[n_numbers:]
                full = torch.stack(share) >= 1.0
                idx = torch.tensor(list(masked_js), device=bad.device)
                stop = stop.index_put((idx,), full & (runs + 1 >= FULLY_MASKED_STOP))
            tr.optimizer.captured_update(layout, vec[:n_numbers], grads_st, grads_own, ~(bad | stop))
            return torch.cat([bad.float(), *(s.reshape(1) for s in share), *values])


def _member_tensors(b: Batch) -> dict[str, Any]:
    """A member's batch as the captured function takes it: its tensors only (an absent feature
    is absent, not None)."""
    out: dict[str, Any] = {"ids": b.input_ids, "mask": b.attention_mask}
    if b.image is not None:
        out["image"] = b.image
    if b.clip_text is not None:
        out["clip_text"] = b.clip_text
    if b.text_teachers:
        out["teachers"] = tuple(b.text_teachers)
    return out


def whole_step(trainer: ArrayTrainer, mode: str) -> WholeStep | None:
    """The trainer's captured step for ``compile=graphs`` on a stacked encoder, else None (the
    reason said once)."""
    if mode != "graphs" or not isinstance(trainer.model.encoder, StackedEncoder):
        return None
    why = kernels.autograd_in_graphs_why()
    if why:
        if trainer.rank == 0:
            print(f"compile=graphs: the encoder alone is captured ({why})", flush=True)
        return None
    return WholeStep(trainer)


__all__: Sequence[str] = ("MODES", "BACKEND", "capture", "whole_step", "WholeStep")
