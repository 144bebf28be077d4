"""The final evaluation of an array: each member's best weights on the STS and transfer tasks.

At the end of training (``RunConfig.final_eval``) each member's best weights (the step of its
best STS-B dev score, kept in memory) go back into its slot of the stacked model; the seven STS
tasks' sentences are then encoded once for the whole array and scored per member, and the members
whose config asks for SentEval's transfer tasks get those too, each member's probes trained on
its own embeddings alone. A member's scores so depend on its own weights only, as in a run of
its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from trainables.arrays.array_model import ArrayModel
from trainables.arrays.members import Member
from trainables.evaluation.sts import evaluate_sts_many
from trainables.evaluation.transfer import evaluate_transfer_many
from trainables.models.student import max_positions

Encode = Callable[[list[str]], torch.Tensor]
"""sentences -> (M, n, H) evaluation embeddings of every member alive"""


@torch.no_grad()
def encode_many(model: ArrayModel, tokenizer: Any, device: torch.device,
                sentences: list[str]) -> torch.Tensor:
    """(M, n, H) evaluation embeddings ([CLS] before the MLP) of every member alive; whole
    sentences, as SentEval feeds them, cut only at the encoder's position limit."""
    tok = tokenizer(list(sentences), padding=True, truncation=True,
                    max_length=max_positions(model.encoder.hf_config, tokenizer),
                    return_tensors="pt")
    return model.cls(tok["input_ids"].to(device), tok["attention_mask"].to(device)).float().cpu()


def final_metrics(model: ArrayModel, alive: Sequence[Member], encode: Encode, senteval_dir: Path,
                  batch_size: int, step: int, tell: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Seven STS tasks, average, alignment and uniformity of each member's best weights (and
    the transfer tasks of the members whose config asks for them); ``tell`` hears each
    evaluation as it starts."""
    tell("STS")
    for j, m in enumerate(alive):
        if m.record.best_state is not None:
            model.load_member_state(j, m.record.best_state)
    results = evaluate_sts_many(encode, senteval_dir, batch_size=batch_size)
    out = {}
    for m, res in zip(alive, results, strict=True):
        d = {f"test/{k}": float(v) for k, v in res.items() if isinstance(v, int | float)}
        d.update(best_stsb_dev=m.record.best, best_step=m.record.best_step, steps=step)
        out[m.key] = d
    transfer_metrics(out, alive, encode, batch_size,
                     lambda name, i, n: tell(f"transfer {name} ({i}/{n})"))
    return out


def transfer_metrics(out: dict[str, dict[str, Any]], alive: Sequence[Member], encode: Encode,
                     batch_size: int, on_task: Callable[[str, int, int], None] | None = None) -> None:
    """SentEval's transfer tasks (``RunConfig.transfer``) of each member's best weights, as
    ``transfer/<task>`` and ``transfer/avg``: sentences encoded once for the array, each
    member's probes trained on its own embeddings alone (``trainables.evaluation.transfer``)."""
    todo: dict[tuple[Path, str], list[int]] = {}
    for j, m in enumerate(alive):
        if m.cfg.transfer is not None and m.data.transfer_dir is not None:
            todo.setdefault((m.data.transfer_dir, m.cfg.transfer), []).append(j)
    for (folder, mode), idx in todo.items():
        results = evaluate_transfer_many(lambda s, idx=idx: encode(s)[idx], folder,
                                         mode=mode, batch_size=batch_size, on_task=on_task)
        for j, res in zip(idx, results, strict=True):
            out[alive[j].key].update(
                {f"transfer/{k}": float(v) for k, v in res.items() if isinstance(v, int | float)})
