"""The student: a Hugging Face encoder plus the small trainable heads its method declares.

One ``nn.Module`` holds everything the optimiser trains: ``encoder``, the Hugging Face
``AutoModel`` (its pretrained ``pooler`` is kept so the saved folder is a complete model, but it is
unused, as in the official code, and frozen here; docs/official-code.md §2.1), plus the SimCSE MLP and the method's heads of
``trainables.models.heads``. Only the modules a method declares are built; DALR's dead modules
(``grounding_image``, ``sim_classifier``, ``tmlp``) are not, since they never receive a gradient.
Teachers are separate frozen objects owned by the trainer and are never attributes of this module.
Training runs on ``trainables.arrays``, which stacks many members' encoders (BERT, RoBERTa) or
loops over them (any other bidirectional encoder: DistilBERT, MPNet, ...; docs/encoders.md); a
member's best weights are written through this class. The sentence embedding is always the first
token's last hidden state ([CLS], ``<s>``) before the MLP: the official ``cls_before_pooler``.

A saved student is a plain Hugging Face model folder that ``transformers.AutoModel`` and
``sentence_transformers.SentenceTransformer`` (CLS pooling, no Normalize) both load offline, plus
``heads.safetensors`` and ``student_config.json`` for resuming.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from trainables.models.heads import RESERVED, MethodHeads, simcse_mlp
from trainables.objectives.methods import Head, HeadDims, StudentOutputs, get, resolve_heads

HEADS_FILE = "heads.safetensors"
CONFIG_FILE = "student_config.json"
POSITION_OFFSET_TYPES = ("roberta", "xlm-roberta", "camembert", "mpnet", "data2vec-text",
                         "roberta-prelayernorm", "xlm-roberta-xl", "longformer", "ibert")
"""model types whose position ids start after ``pad_token_id`` (fairseq's layout)"""
DROPOUT_FIELDS = {"distilbert": ("dropout", "attention_dropout")}
"""config names of (hidden, attention) dropout where they are not BERT's"""
BERT_DROPOUT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob")


def check_encoder_only(hf_config, name: str) -> None:
    """One-line ``ValueError`` unless ``hf_config`` is a bidirectional text encoder, whose first
    token's last hidden state can serve as the sentence embedding ([CLS] pooling)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    t = hf_config.model_type
    fix = "pass a bidirectional encoder such as BERT, RoBERTa, DistilBERT or MPNet"
    if getattr(hf_config, "is_encoder_decoder", False):
        raise ValueError(f"encoder '{name}' is an encoder-decoder model ({t}); {fix}")
    if getattr(hf_config, "is_decoder", False) or getattr(hf_config, "add_cross_attention", False):
        raise ValueError(f"encoder '{name}' ({t}) is configured as a decoder (is_decoder or "
                         f"add_cross_attention); set both to False or {fix}")
    if t not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        raise ValueError(f"encoder '{name}' has model_type '{t}', which is not a bidirectional text "
                         f"encoder (transformers has no masked-LM model for it); {fix}")


def max_positions(hf_config, tokenizer=None) -> int:
    """Longest input the encoder accepts (fairseq-style positions start after padding_idx)."""
    n = hf_config.max_position_embeddings
    if hf_config.model_type in POSITION_OFFSET_TYPES:
        n -= hf_config.pad_token_id + 1
    return min(n, tokenizer.model_max_length) if tokenizer is not None else n


def dropout_overrides(model_type: str, hidden: float | None, attention: float | None) -> dict:
    """``AutoConfig`` keyword overrides for the encoder's hidden / attention dropout rates."""
    h, a = DROPOUT_FIELDS.get(model_type, BERT_DROPOUT_FIELDS)
    return {k: v for k, v in ((h, hidden), (a, attention)) if v is not None}


@dataclass(frozen=True)
class StudentConfig:
    """What the student is built from. The heads' input dims come from the feature store."""

    encoder: str = "bert-base-uncased"
    """hub name (must already be in the local cache when offline) or a local HF model folder"""
    method: str = "mcse"
    """a registered method (simcse, mcse, kdmcse, dalr or a plug-in): decides which heads are
    built when ``heads`` is None"""
    proj_dim: int = 256
    """grounding-space dim of grounding / image / CLIP-text heads (official: 256)"""
    image_dim: int | None = None
    """dim of the stored image feature (2048 ResNet-50 for MCSE, 768 CLIP ViT-L/14, 512 ViT-B/32);
    required by every method but simcse"""
    clip_text_dim: int | None = None
    """dim of the stored CLIP caption feature; None = absent. kdmcse falls back to image_dim (CLIP
    embeds both modalities in one space); mcse builds the CLIP-text head only when it is given
    (KDMCSE Table 5's MCSE + L_t); dalr never builds it (its ``tmlp`` is unused)"""
    hidden_dropout: float | None = None
    """override of the encoder's hidden_dropout_prob (None: keep the checkpoint's, 0.1 for BERT)"""
    attention_dropout: float | None = None
    """override of the encoder's attention_probs_dropout_prob (None: keep the checkpoint's)"""
    heads: tuple[tuple[str, Head], ...] | None = None
    """the heads to build, resolved (as the trainer declares them from the run's settings, and as
    a saved student records them, so it loads without the method's code); None: the method's
    heads at its default settings with the dims above"""

    def __post_init__(self) -> None:
        if self.heads is not None:
            object.__setattr__(self, "heads", _as_heads(self.heads))
        else:
            try:
                method = get(self.method)
            except ValueError:
                raise ValueError(f"StudentConfig.method={self.method!r} is unknown; use a "
                                 "registered method or pass heads") from None
            if method.needs(method.settings()).image and (self.image_dim is None or self.image_dim <= 0):
                raise ValueError(
                    f"method {self.method!r} needs StudentConfig.image_dim (the stored image feature's "
                    f"dim, e.g. 768 for CLIP ViT-L/14, 2048 for ResNet-50); got {self.image_dim}"
                )
        if self.proj_dim <= 0:
            raise ValueError(f"StudentConfig.proj_dim={self.proj_dim} must be a positive int")
        if self.clip_text_dim is not None and self.clip_text_dim <= 0:
            raise ValueError(f"StudentConfig.clip_text_dim={self.clip_text_dim} must be positive or None")
        for name in ("hidden_dropout", "attention_dropout"):
            p = getattr(self, name)
            if p is not None and not 0.0 <= p < 1.0:
                raise ValueError(f"StudentConfig.{name}={p} must lie in [0, 1) or be None")

    def resolved_heads(self, hidden: int) -> tuple[tuple[str, Head], ...]:
        """``heads``, or the method's at its default settings for a ``hidden``-wide encoder."""
        if self.heads is not None:
            return self.heads
        method = get(self.method)
        dims = HeadDims(hidden, self.proj_dim, self.image_dim, self.clip_text_dim)
        return resolve_heads(method.heads(method.settings(), dims), dims, RESERVED)


def _as_heads(value) -> tuple[tuple[str, Head], ...]:
    """Heads as given, or as ``student_config.json`` stores them (lists and dicts)."""
    out = []
    for name, h in value:
        if not isinstance(h, Head):
            h = Head(**{k: tuple(v) if k == "into" else v for k, v in dict(h).items()})
        out.append((str(name), h))
    return tuple(out)


def _hub_offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}
    return env or bool(constants.HF_HUB_OFFLINE)


def loadable_source(name: str) -> str:
    """A loadable local folder or cached hub name, else one clear ``OSError`` line."""
    from transformers import AutoConfig

    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"encoder folder '{path}' has no config.json; pass a Hugging Face model folder "
                "(config.json, weights, tokenizer files)"
            )
        return str(path)
    if path.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1:
        raise FileNotFoundError(f"encoder path '{name}' does not exist; pass an existing model folder")
    try:
        AutoConfig.from_pretrained(name)
    except (OSError, ValueError) as err:
        if _hub_offline():
            msg = (f"encoder '{name}' is not in the local cache and the hub is offline; "
                   "pass a local model folder or unset HF_HUB_OFFLINE")
        else:
            msg = (f"encoder '{name}' could not be loaded from the hub or the local cache "
                   f"({type(err).__name__}); pass a local model folder")
        raise OSError(msg) from None
    return name


def _write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


class Student(MethodHeads):
    """Encoder + MLP pooler + the heads of ``config.method``; see the module docstring."""

    def __init__(self, config: StudentConfig):
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        source = loadable_source(config.encoder)
        model_type = AutoConfig.from_pretrained(source).model_type
        hf_config = AutoConfig.from_pretrained(source, **dropout_overrides(
            model_type, config.hidden_dropout, config.attention_dropout))
        check_encoder_only(hf_config, config.encoder)
        h = hf_config.hidden_size
        heads = config.resolved_heads(h)
        super().__init__(heads)
        # The resolved heads are saved with the student, so it loads without its method's code.
        self.config = dataclasses.replace(config, heads=heads)
        self.hidden_size = h
        # fp32 weights whatever the checkpoint dtype: the official runs train in fp32.
        self.encoder = AutoModel.from_pretrained(source, config=hf_config, dtype=torch.float32)
        if getattr(self.encoder, "pooler", None) is not None:
            # Kept so the saved folder is a complete model, but never used: frozen, so it is not
            # optimised and DDP does not wait for its (never coming) gradients.
            self.encoder.pooler.requires_grad_(False)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True)
        except (OSError, ValueError, TypeError) as err:
            raise OSError(f"encoder '{config.encoder}' has no loadable tokenizer files ({err})") from None
        # Missing from the checkpoint, so the official init_weights() gives N(0, 0.02), bias 0.
        self.mlp = simcse_mlp(h, getattr(hf_config, "initializer_range", 0.02))

    # ----------------------------------------------------------------------------- properties
    @property
    def device(self) -> torch.device:
        return self.mlp[0].weight.device

    @property
    def max_positions(self) -> int:
        """Longest input the encoder accepts (RoBERTa positions start after padding_idx)."""
        return max_positions(self.encoder.config, self.tokenizer)

    # ----------------------------------------------------------------------------- training
    def _cls(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # token_type_ids are never passed, as in the official forward (docs/official-code.md §2.1); the first token's
        # state is the embedding for every architecture (DistilBERT has no pooler to use instead).
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state[:, 0]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        image: torch.Tensor | None = None,
        clip_text: torch.Tensor | None = None,
    ) -> StudentOutputs:
        """Two dropout views of each sentence from ONE encoder pass (SimCSE's unsup trick).

        ``input_ids``/``attention_mask`` are (bs, L) and each row is repeated twice here, as the
        official collator does (rows 2i and 2i+1 are sentence i); an already repeated (bs, 2, L)
        batch is accepted too. Dropout differs between the views only in train mode.
        ``image`` (bs, image_dim) and ``clip_text`` (bs, clip_text_dim) are the stored, unnormalised
        features; the grounding outputs are computed only when ``image`` is given (and ignored by
        simcse), ``t`` only when the method has a CLIP-text head and ``clip_text`` is given.
        """
        if input_ids.dim() == 2:
            bs = input_ids.shape[0]
            ids, mask2, mask = (input_ids.repeat_interleave(2, dim=0),
                                attention_mask.repeat_interleave(2, dim=0), attention_mask)
        elif input_ids.dim() == 3 and input_ids.shape[1] == 2:
            bs = input_ids.shape[0]
            ids, mask2 = input_ids.flatten(0, 1), attention_mask.flatten(0, 1)
            mask = attention_mask[:, 0]
        else:
            raise ValueError(f"input_ids must be (bs, L) or (bs, 2, L), got shape {tuple(input_ids.shape)}")
        cls = self._cls(ids, mask2).view(bs, 2, -1)  # l_pool, [CLS] before the MLP
        return self.heads_outputs(cls, self.mlp(cls), mask, image=image, clip_text=clip_text)

    def named_trainable_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """The student's own parameters: encoder, MLP and this method's heads.

        Teachers are never attributes of ``Student``, so they cannot appear. The encoder's
        pretrained ``pooler`` is frozen and left out: it is never used, so it never receives a
        gradient (the official optimiser holds it but AdamW skips it, so the update is the same).
        """
        for name, p in self.named_parameters():
            if p.requires_grad:
                yield name, p

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for _, p in self.named_trainable_parameters()]

    # ----------------------------------------------------------------------------- evaluation
    @contextlib.contextmanager
    def _eval_mode(self) -> Iterator[None]:
        modes = [(m, m.training) for m in self.modules()]
        self.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            for m, mode in modes:
                m.training = mode

    def encode_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[CLS] before the MLP (``cls_before_pooler``) for pre-tokenised (n, L) ids, on the model device."""
        with self._eval_mode():
            return self._cls(input_ids.to(self.device), attention_mask.to(self.device))

    def encode(self, sentences: list[str], batch_size: int = 128,
               max_length: int | None = None) -> torch.Tensor:
        """The evaluation embedding (CLS before the MLP) of each sentence, (n, h) float32 on CPU.

        No truncation by default, as SentEval feeds whole sentences (SimCSE's batcher passes no
        max_length); only inputs beyond the encoder's position limit are cut, since they would
        crash it. Sentences are batched longest-first to cut padding, and returned in input order.
        """
        if isinstance(sentences, str):
            raise TypeError("encode expects a list of sentences, got one str; wrap it in a list")
        if not sentences:
            return torch.empty(0, self.hidden_size)
        limit = min(max_length or self.max_positions, self.max_positions)
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
        chunks = []
        with self._eval_mode():
            for start in range(0, len(order), batch_size):
                batch = [sentences[i] for i in order[start:start + batch_size]]
                tok = self.tokenizer(batch, padding=True, truncation=True, max_length=limit,
                                     return_tensors="pt")
                chunks.append(self._cls(tok["input_ids"].to(self.device),
                                        tok["attention_mask"].to(self.device)))
        emb = torch.cat(chunks).float().cpu()
        out = torch.empty_like(emb)
        out[torch.tensor(order)] = emb
        return out

    # ----------------------------------------------------------------------------- save / load
    def heads_state_dict(self) -> dict[str, torch.Tensor]:
        """Everything but the encoder (MLP, heads, BatchNorm running stats)."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("encoder.")}

    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """Write an HF + sentence-transformers folder (CLS pooling) plus heads, atomically."""
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        try:
            self.encoder.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            _write_json(tmp / "modules.json", [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ])
            _write_json(tmp / "sentence_bert_config.json",
                        {"max_seq_length": self.max_positions, "do_lower_case": False})
            (tmp / "1_Pooling").mkdir()
            _write_json(tmp / "1_Pooling" / "config.json", {
                "word_embedding_dimension": self.hidden_size, "pooling_mode_cls_token": True,
                "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
            })
            heads = {k: v.detach().cpu().contiguous() for k, v in self.heads_state_dict().items()}
            save_file(heads, str(tmp / HEADS_FILE), metadata={"method": self.config.method})
            _write_json(tmp / CONFIG_FILE, dataclasses.asdict(self.config))
            if path.exists():  # swap, so a crash never leaves a half-written best checkpoint
                old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
                os.replace(path, old / "x")
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return path

    def load_heads(self, path: str | os.PathLike) -> None:
        """Restore MLP + heads from a saved folder (or the heads file itself)."""
        from safetensors.torch import load_file

        file = Path(path)
        file = file / HEADS_FILE if file.is_dir() else file
        if not file.is_file():
            raise FileNotFoundError(f"{file}: no student heads file; write one with Student.save_pretrained")
        state = load_file(str(file))
        expected = self.heads_state_dict()
        missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
        bad = [k for k in expected if k in state and state[k].shape != expected[k].shape]
        if missing or extra or bad:
            raise ValueError(
                f"{file}: heads do not fit this {self.config.method!r} student (missing {missing[:3]}, "
                f"unexpected {extra[:3]}, wrong shape {bad[:3]}); build it with the saved {CONFIG_FILE}"
            )
        self.load_state_dict(state, strict=False)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, config: StudentConfig | None = None) -> Student:
        """A full student (encoder + heads) from ``save_pretrained``; config defaults to the saved one."""
        path = Path(path)
        if config is None:
            cfg_file = path / CONFIG_FILE
            if not cfg_file.is_file():
                raise FileNotFoundError(f"{cfg_file} not found; pass config= or a folder from Student.save_pretrained")
            config = StudentConfig(**json.loads(cfg_file.read_text()))
        student = cls(dataclasses.replace(config, encoder=str(path)))
        student.load_heads(path)
        return student
