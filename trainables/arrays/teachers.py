"""An array's text teachers: each frozen model loaded once, each ensemble run as one forward.

Built once (``build_teachers``): one frozen model per distinct path, shared by every member that
names it, and one stacked forward (``stacked_teachers.py``) per distinct ensemble; a member whose
teachers cannot be built fails alone. At every caption step (``teacher_outputs``) one forward runs
over the rows of every member that reads the same teachers, and ``teacher_inputs`` hands each
member its rows, in the order and with the weights its config names.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import Any

import torch

from trainables.arrays.members import Member, pad_to
from trainables.arrays.stacked_teachers import StackedTeachers
from trainables.data.batches import Batch
from trainables.models.pretrained import resolve_encoder
from trainables.objectives import TeacherInputs

Attempt = Callable[[str, Callable[[], Any]], Any]
"""``attempt(member_key, build)``: ``build()``, or None with the member marked failed"""


def build_teachers(members: Sequence[Member], attempt: Attempt, failed: Container[str],
                   tokenizer: Any, device: torch.device, amp: bool) -> None:
    """Text teachers, one frozen model per distinct path, shared by every member using it,
    and one stack per distinct ensemble of them. A member whose teachers cannot be built
    fails alone: ``attempt(key, build)`` runs ``build`` and marks the member failed if it
    raises; members in ``failed`` already have."""
    loaded: dict[str, Any] = {}
    stacks: dict[tuple[int, ...], StackedTeachers | None] = {}
    # bf16 teachers only with bf16 training (their outputs are frozen targets, so bf16 would
    # tie ranks the fp32 official teachers do not)
    dtype = torch.bfloat16 if amp and device.type == "cuda" else torch.float32
    for m in members:
        if m.needs_teachers and m.key not in failed:
            attempt(m.key, lambda m=m: _member_teachers(m, loaded, stacks, dtype, tokenizer, device))


def _member_teachers(m: Member, loaded: dict, stacks: dict, dtype: torch.dtype, tokenizer: Any,
                     device: torch.device) -> None:
    from trainables.models.teachers import TeacherEnsemble, TextTeacher

    paths = [resolve_encoder(t, m.cfg.data.cache_dir) for t in m.cfg.text_teachers]
    weights = m.needs.teacher_weights or (1.0,) * len(paths)
    if len(paths) != len(weights):
        raise ValueError(
            f"{len(paths)} text teachers but {len(weights)} teacher_weights; "
            "give one weight per teacher (objective.teacher_weights)"
        )
    # One model named twice (the demo maps every teacher of a combination to its one text
    # teacher) is loaded and run once; its outputs stand for each name it has
    # (teacher_index), so the loss sees the configured teachers and weights.
    merged: dict[str, float] = {}
    for p, w in zip(paths, weights, strict=True):
        merged[p] = merged.get(p, 0.0) + float(w)
    if len(merged) < len(paths):
        m.teacher_index = tuple(list(merged).index(p) for p in paths)
    for p in merged:
        if p not in loaded:
            loaded[p] = TextTeacher(p, dtype=dtype, student_tokenizer=tokenizer).to(device)
    m.teachers = TeacherEnsemble([loaded[p] for p in merged], list(merged.values()))
    # Stored [CLS] columns replace the teachers' forward pass unless token states are needed.
    stored = m.data.pairs.feature_columns if m.data.pairs is not None else ()
    if not m.needs.teacher_tokens and all(c in stored for c in m.teachers.columns):
        m.teacher_columns = tuple(m.teachers.columns)
    else:  # the teachers run every caption step: as one stacked forward where they can
        for t in m.teachers.teachers:
            t.model  # built here, so a teacher that cannot load fails its members now  # noqa: B018
        key = tuple(id(t) for t in m.teachers.teachers)
        if key not in stacks:
            stacks[key] = StackedTeachers.build(m.teachers.teachers)
        m.teacher_stack = stacks[key]


def teacher_outputs(alive: Sequence[Member], batches: list[tuple[str, Batch]],
                    pad: int) -> dict[int, tuple[tuple, tuple]]:
    """One forward per teacher over every member that needs it, or one for all its
    teachers where they are stacked (``stacked_teachers.py``): j -> (embs, locals); ``pad``: the
    tokenizer's padding id.

    Members share a forward when they load the same teachers (each member has its own
    ensemble object, so the key is the teachers', not the ensemble's); teachers are frozen and
    run without dropout, so a row's output does not depend on the rows beside it."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for j, (m, (kind, b)) in enumerate(zip(alive, batches, strict=True)):
        if kind == "pair" and m.teachers is not None and not b.text_teachers:
            groups.setdefault(tuple(id(t) for t in m.teachers.teachers), []).append(j)
    out: dict[int, tuple[tuple, tuple]] = {}
    for js in groups.values():
        first = alive[js[0]]
        run = first.teacher_stack if first.teacher_stack is not None else first.teachers
        sizes = [batches[j][1].input_ids.shape for j in js]
        length = max(s[1] for s in sizes)
        ids = torch.cat([pad_to(batches[j][1].input_ids, s[0], length, pad) for j, s in zip(js, sizes, strict=True)])
        mask = torch.cat([pad_to(batches[j][1].attention_mask, s[0], length, 0) for j, s in zip(js, sizes, strict=True)])
        outs = run.encode(ids, mask)
        start = 0
        for j, (n, li) in zip(js, sizes, strict=True):
            embs = tuple(o.emb[start:start + n] for o in outs)
            local = tuple(o.local[start:start + n, : li - 1] for o in outs)
            out[j] = (embs, local)
            start += n
    return out


def teacher_inputs(m: Member, b: Batch, computed) -> TeacherInputs:
    """What member ``m``'s loss reads of its teachers on caption batch ``b``: ``computed`` (its
    rows of ``teacher_outputs``), or the stored columns where the teachers did not run."""
    embs, local = (b.text_teachers, ()) if computed is None else computed
    if m.teacher_index:
        embs = tuple(embs[i] for i in m.teacher_index)
        local = tuple(local[i] for i in m.teacher_index) if local else ()
    return TeacherInputs(image=b.image, clip_text=b.clip_text, text_teachers=embs,
                         text_teacher_local=local if m.needs.teacher_tokens else ())
