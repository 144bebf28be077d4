"""DALR's frozen text teachers (SimCSE, DiffCSE, CLIP text, any encoder).

DALR (docs/official-code.md §6.1-§6.2) runs two frozen sentence encoders on every
caption batch: ``emb`` (pooled, (bs, d)) feeds S_T, F_T (L_rank, L_CMA, L_IMA) and ``local``
(``last_hidden_state[:, 1:]``, (bs, L-1, d)) feeds the code-only global-local term. The weighted
combination (S_T, F_T, Local_T) lives in :mod:`trainables.objectives.dalr`; this module only produces
per-teacher tensors.

What is precomputed and what is not, and why:
  * ``emb`` is precomputed. Teachers are deterministic (eval mode, no dropout) and both dropout
    views carry identical tokens, so a caption's teacher embedding is a fixed function of the
    caption (and max_length). :func:`trainables.data.teacher_columns.precompute_teacher_columns` stores it once as a
    ``teacher_<name>`` column of the feature store, so training needs no teacher forward for
    S_T / F_T.
  * ``local`` is computed on the fly. It is (L-1) x d floats per caption: 31 x 768 x 4 B = 95 KB,
    about 15 GB for Flickr30k's 159k captions, too big to store; g2l runs the teachers per batch.
    With ``use_g2l`` off, training needs no teacher model at all.

Token ids: the official teachers consume the *student's* ``input_ids`` (valid only with a shared
vocabulary). :class:`TextTeacher` checks that at construction, and ``retokenize=True`` instead
tokenises the raw captions with the teacher's own tokenizer; its local states are then aligned to
the teacher's mask (``TeacherOutput.local_mask``), which g2l must use instead of the student's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

POOLERS = ("cls", "cls_before_pooler", "avg", "projection")
CLIP_TYPES = ("clip", "clip_text_model")
BIDIRECTIONAL = ("bert", "roberta", "xlm-roberta", "electra")
"""encoders whose Hugging Face forward takes a prepared 4-D additive attention mask as it is"""


def default_pooler(name_or_path: str, kind: str = "encoder") -> str:
    """DALR's ``train_mix.py`` rule: ``cls_before_pooler`` if the path contains the case-sensitive
    substring "simcse" or "DiffCSE", else ``avg``. CLIP text teachers use their projection."""
    if kind == "clip":
        return "projection"
    return "cls_before_pooler" if ("simcse" in name_or_path or "DiffCSE" in name_or_path) else "avg"


def as_tokenizer(tok):
    """A tokenizer, loaded from its folder or id when given one."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok)) if isinstance(tok, str | Path) else tok


@dataclass(frozen=True)
class TeacherOutput:
    emb: torch.Tensor
    """(bs, d) pooled embedding, float32, no grad"""
    local: torch.Tensor
    """(bs, L-1, d) ``last_hidden_state[:, 1:]``, float32, no grad"""
    local_mask: torch.Tensor
    """(bs, L-1) attention mask aligned with ``local`` (teacher's own when retokenised)"""


class TextTeacher:
    """A frozen text encoder. Deliberately not an ``nn.Module`` (as in the official code): it can
    never be registered into the student, so its weights never reach an optimiser or checkpoint."""

    def __init__(
        self,
        name_or_path: str | Path,
        pooler: str | None = None,
        dtype: torch.dtype | None = None,
        device: str | torch.device | None = None,
        *,
        name: str | None = None,
        student_tokenizer=None,
        retokenize: bool = False,
        max_length: int = 32,
    ):
        from transformers import AutoConfig

        self.name_or_path = str(name_or_path)
        self.name = name or re.sub(r"[^0-9a-z]+", "_", Path(self.name_or_path).name.lower()).strip("_")
        if not self.name:
            raise ValueError(f"cannot derive a teacher name from {self.name_or_path!r}; pass name=")
        config = AutoConfig.from_pretrained(self.name_or_path)
        self.kind = "clip" if config.model_type in CLIP_TYPES else "encoder"
        self.pooler = pooler or default_pooler(self.name_or_path, self.kind)
        allowed = ("projection", "avg") if self.kind == "clip" else ("cls", "cls_before_pooler", "avg")
        if self.pooler not in allowed:
            raise ValueError(
                f"pooler {self.pooler!r} is not valid for {self.kind} teacher {self.name_or_path}; "
                f"use one of {allowed}"
            )
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        # bf16 halves teacher memory/time on GPU; CPUs have no fast bf16 matmul, so fp32 there.
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        if self.kind == "clip":
            self.config = config.text_config if config.model_type == "clip" else config
            if config.model_type == "clip":
                self.config.projection_dim = config.projection_dim
        else:
            self.config = config
        self._model = None
        self.tokenizer = as_tokenizer(self.name_or_path)
        self.retokenize = retokenize
        self.max_length = max_length
        if student_tokenizer is not None and not retokenize:
            check_same_vocab(self.tokenizer, as_tokenizer(student_tokenizer), self.name_or_path)

    @property
    def model(self):
        """The frozen Hugging Face model, built at its first use: a run whose captions carry this
        teacher's stored embeddings never runs it, nor pays for transformers' modeling import
        (3-4 CPU s an array) or its weights' memory."""
        if self._model is None:
            from transformers import AutoModel, CLIPTextModelWithProjection
            from transformers.utils import logging as hf_logging

            if self.kind == "clip":
                level = hf_logging.get_verbosity()
                hf_logging.set_verbosity_error()  # the vision tower's weights are expected leftovers
                try:
                    model = CLIPTextModelWithProjection.from_pretrained(self.name_or_path, config=self.config)
                finally:
                    hf_logging.set_verbosity(level)
            else:
                model = AutoModel.from_pretrained(self.name_or_path)
            self._model = model.to(device=self.device, dtype=self.dtype).eval().requires_grad_(False)
        return self._model

    @property
    def dim(self) -> int:
        cfg = self.config
        return int(cfg.projection_dim if self.pooler == "projection" else cfg.hidden_size)

    def to(self, device: str | torch.device) -> TextTeacher:
        self.device = torch.device(device)
        if self._model is not None:
            self._model.to(self.device)
        return self

    @torch.no_grad()  # no_grad, not inference_mode: outputs are used as constants in autograd losses
    def encode_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(emb (bs, d), local (bs, L-1, d)) from token ids of *this teacher's* vocabulary."""
        ids = input_ids.to(self.device)
        mask = attention_mask.to(self.device)
        out = self.model(input_ids=ids, attention_mask=self._model_mask(mask), return_dict=True)
        hidden = out.last_hidden_state
        dtype = torch.promote_types(hidden.dtype, torch.float32)  # float64 stays float64
        if self.pooler == "cls_before_pooler":
            emb = hidden[:, 0]
        elif self.pooler == "cls":
            emb = out.pooler_output
        elif self.pooler == "projection":
            emb = out.text_embeds
        else:  # masked average over all real tokens, [CLS]/[SEP] included (DALR Teacher.encode)
            m = mask.unsqueeze(-1).to(dtype)
            emb = (hidden.to(dtype) * m).sum(1) / m.sum(1).clamp(min=1e-7)
        return emb.to(dtype), hidden[:, 1:].to(dtype)

    def _model_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """The mask handed to the model: for a bidirectional encoder, built ahead as the additive
        (bs, 1, 1, L) mask it would build, so Hugging Face's mask preparation takes it as it is
        instead of reading ``padding_mask.all()`` back from the device (a host sync in the middle
        of a training step); other models (CLIP's causal text tower) get the 2-D mask."""
        if self.model.config.model_type not in BIDIRECTIONAL:
            return mask
        dtype = self.model.dtype
        keep = mask[:, None, None, :].bool()
        return torch.zeros(keep.shape, dtype=dtype, device=mask.device).masked_fill_(
            ~keep, torch.finfo(dtype).min)

    def tokenize(self, texts: Sequence[str], max_length: int | None = None) -> dict[str, torch.Tensor]:
        """The teacher's own tokenisation, as training tokenises: truncate, pad to the longest."""
        return self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=max_length or self.max_length,
            return_tensors="pt",
        )

    def encode(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        texts: Sequence[str] | None = None,
    ) -> TeacherOutput:
        """Student ids (shared vocabulary) or, with ``retokenize=True``, the raw ``texts``."""
        if self.retokenize:
            if texts is None:
                raise ValueError(f"teacher {self.name} has retokenize=True; pass the raw captions as texts=")
            tok = self.tokenize(texts)
            input_ids, attention_mask = tok["input_ids"], tok["attention_mask"]
        elif input_ids is None or attention_mask is None:
            raise ValueError(f"teacher {self.name} reads the student's token ids; pass input_ids and attention_mask")
        emb, local = self.encode_ids(input_ids, attention_mask)
        return TeacherOutput(emb, local, attention_mask[:, 1:].to(local.device))


def check_same_vocab(teacher_tok, student_tok, teacher_path: str) -> None:
    """Raise unless both tokenizers map every token to the same id."""
    if teacher_tok.get_vocab() == student_tok.get_vocab():
        return
    student = getattr(student_tok, "name_or_path", "") or type(student_tok).__name__
    raise ValueError(
        f"text teacher {teacher_path} ({type(teacher_tok).__name__}, {len(teacher_tok)} tokens) does not "
        f"share the student's vocabulary ({student}, {type(student_tok).__name__}, {len(student_tok)} "
        "tokens); the official code feeds the student's token ids to the teachers. Use teachers with "
        "the student's tokenizer (BERT teachers for a BERT student) or pass retokenize=True"
    )


class TeacherEnsemble:
    """DALR's weighted teachers (SimCSE 0.33 + DiffCSE 0.67 in the scripts). Validates the weights and
    returns per-teacher tensors; the weighted S_T / F_T / Local_T are computed in trainables.objectives.dalr.
    ``encode`` runs the teachers one after the other; an array runs teachers of one architecture
    as one stacked forward instead (trainables/arrays/stacked_teachers.py)."""

    def __init__(self, teachers: Sequence[TextTeacher], weights: Sequence[float]):
        teachers, weights = list(teachers), [float(w) for w in weights]
        if not teachers:
            raise ValueError("TeacherEnsemble needs at least one teacher")
        if len(weights) != len(teachers):
            raise ValueError(
                f"{len(teachers)} teachers but {len(weights)} weights {weights}; give one weight per teacher"
            )
        bad = [w for w in weights if not (math.isfinite(w) and w > 0)]
        if bad:
            raise ValueError(f"teacher weights must be finite and > 0, got {weights}; drop a teacher instead of weighting it 0")
        names = [t.name for t in teachers]
        if len(set(names)) != len(names):
            raise ValueError(f"teacher names must be unique (they name store columns), got {names}; pass name=")
        self.teachers = tuple(teachers)
        self.weights = tuple(weights)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.teachers)

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(f"teacher_{n}" for n in self.names)

    def encode(self, input_ids=None, attention_mask=None, texts=None) -> tuple[TeacherOutput, ...]:
        return tuple(t.encode(input_ids, attention_mask, texts) for t in self.teachers)

    def embeddings(self, input_ids=None, attention_mask=None, texts=None) -> tuple[torch.Tensor, ...]:
        return tuple(o.emb for o in self.encode(input_ids, attention_mask, texts))

    def precomputed(self, batch: Mapping[str, np.ndarray], device=None) -> tuple[torch.Tensor, ...]:
        """Per-teacher embeddings from a store batch's ``teacher_<name>`` columns."""
        missing = [c for c in self.columns if c not in batch]
        if missing:
            raise KeyError(
                f"feature store batch has no column(s) {missing}; run "
                "trainables.data.teacher_columns.precompute_teacher_columns on the store first"
            )
        return tuple(torch.as_tensor(np.asarray(batch[c]), device=device) for c in self.columns)
