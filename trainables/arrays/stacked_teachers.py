"""DALR's frozen text teachers of one ensemble, run as one stacked forward.

DALR runs two frozen teachers (SimCSE and DiffCSE, both BERT-base in the paper) on every caption
batch. ``TeacherEnsemble.encode`` runs their Hugging Face models one after the other: two full
forwards, 157 launched operators each at BERT-base depth. Teachers of one architecture are
exactly what :class:`~trainables.arrays.encoder.StackedEncoder` computes with its member axis
standing for the teacher: one forward, its matmuls batched over the teachers and its attention
fused (``fused_attention``: teachers never drop out), 177 operators for both: one Hugging Face
forward's 157 less its unused pooler, plus an ``addcmul`` per LayerNorm for its per-teacher
affine (25). Measured by ``bench/launch_count.py``, phase "teachers".

It lives here, not beside ``TextTeacher`` in ``trainables/models/``, because the stacked encoder
is the arrays package's and models may not import arrays (``tests/test_layers.py``).

When it applies (:func:`unstackable` says why not): two or more teachers, every one a
bidirectional encoder the stacked forward expresses (``hf_layout.check_config``: BERT, RoBERTa),
with equal shapes, activation, eps, positions and model type, the same dtype and device, none
retokenising its captions. Anything else (a CLIP text teacher, mixed architectures, one teacher)
keeps ``TeacherEnsemble.encode``.

Memory: the stack takes the weights. Each Hugging Face model's parameters are re-pointed at its
row of the stacked tensors (views, no copy), so the device holds one copy of the teachers, and
the Hugging Face models still compute the same thing should anything call them (their pooler,
which the stacked encoder does not store, is used as it is for ``pooler="cls"``). Building the
stack briefly needs a second copy (a BERT-base teacher is 440 MB in fp32). Consequently a
teacher's ``to(device)`` after stacking would move its model away from the stack: the trainer
moves teachers before stacking them, never after. A teacher in two ensembles that order their
teachers differently is stacked into each, and then held twice.

Frozen: no stacked parameter requires grad, the stack is no submodule of the student (this class
is deliberately no ``nn.Module``), it runs without dropout (``generators=None``) and under
``no_grad``, and its dtype is the teachers' (bf16 teachers stay bf16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trainables.arrays.encoder import StackedEncoder
from trainables.arrays.hf_layout import check_config
from trainables.models.teachers import TeacherOutput, TextTeacher

SAME_CONFIG = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers",
               "num_attention_heads", "intermediate_size", "hidden_act", "layer_norm_eps",
               "max_position_embeddings", "type_vocab_size", "pad_token_id",
               "position_embedding_type")
"""config fields the stacked forward reads from its one config: equal in every teacher"""


def unstackable(teachers: Sequence[TextTeacher]) -> str | None:
    """Why these teachers cannot run as one stacked forward (None: they can)."""
    if len(teachers) < 2:
        return "one teacher: nothing to stack"
    for t in teachers:
        if t.kind != "encoder":
            return f"teacher {t.name} is a {t.kind} text tower"
        if t.retokenize:
            return f"teacher {t.name} retokenises its captions (retokenize=True)"
        try:
            check_config(t.model.config)
        except ValueError as e:
            return f"teacher {t.name}: {e}"
        if t.pooler == "cls" and getattr(t.model, "pooler", None) is None:
            return f"teacher {t.name} has pooler='cls' but its model has no pooler"
    first = teachers[0]
    for t in teachers[1:]:
        for field in SAME_CONFIG:
            a, b = (getattr(x.model.config, field, None) for x in (first, t))
            if a != b:
                return f"teachers {first.name} and {t.name} differ in {field} ({a!r} vs {b!r})"
    places = {(p.dtype, p.device) for t in teachers for p in t.model.parameters()}
    if len(places) != 1:
        return f"the teachers' weights are not of one dtype and device: {sorted(map(str, places))}"
    return None


@dataclass(frozen=True)
class StackedTeachers:
    """The teachers of one ensemble, in its order, as one frozen ``StackedEncoder``."""

    teachers: tuple[TextTeacher, ...]
    encoder: StackedEncoder

    @classmethod
    def build(cls, teachers: Sequence[TextTeacher]) -> StackedTeachers | None:
        """The stack, or None where :func:`unstackable` names a reason (then run them one by one)."""
        teachers = tuple(teachers)
        if unstackable(teachers) is not None:
            return None
        with torch.no_grad():
            encoder = StackedEncoder(teachers[0].model.config,
                                     [t.model.state_dict() for t in teachers],
                                     fused_attention=True)
            encoder.requires_grad_(False).eval()
            for i, t in enumerate(teachers):  # one copy on the device: the models read the stack
                views = encoder.member_views(i)
                for key, p in t.model.named_parameters():
                    if key in views:
                        p.data = views[key]
        return cls(teachers, encoder)

    @torch.no_grad()  # no_grad, not inference_mode: outputs are constants in autograd losses
    def encode(self, input_ids: torch.Tensor,
               attention_mask: torch.Tensor) -> tuple[TeacherOutput, ...]:
        """What ``TeacherEnsemble.encode(input_ids, attention_mask)`` returns, per teacher."""
        device = self.teachers[0].device
        ids, mask = input_ids.to(device), attention_mask.to(device)
        raw = self.encoder(ids, mask)  # (teachers, N, L, H); no generators: no dropout
        hidden = raw.to(torch.promote_types(raw.dtype, torch.float32))  # float64 stays float64
        avg = None
        if any(t.pooler == "avg" for t in self.teachers):
            # masked mean over the real tokens, [CLS]/[SEP] included, as TextTeacher.encode_ids
            m = mask.unsqueeze(-1).to(hidden.dtype)
            avg = (hidden * m).sum(2) / m.sum(1).clamp(min=1e-7)
        local_mask = attention_mask[:, 1:].to(device)
        out = []
        for i, t in enumerate(self.teachers):
            if t.pooler == "cls_before_pooler":
                emb = hidden[i, :, 0]
            elif t.pooler == "cls":  # HF's pooler output, with this teacher's pooler weights
                emb = t.model.pooler(raw[i]).to(hidden.dtype)
            else:
                emb = avg[i]
            out.append(TeacherOutput(emb, hidden[i, :, 1:], local_mask))
        return tuple(out)
