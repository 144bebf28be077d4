"""What an array writes to disk: its resumable state, its final record, its members' students.

A checkpoint (``save_state``, at every evaluation) holds everything a bit-exact resume needs: the
stacked weights, the optimiser's moments and step counts, each member's schedule position, its
random streams and its bookkeeping (best score and weights, dev curve, fate). ``read_state``
refuses a checkpoint of another array, by the members' config hashes. A finished array leaves
``final.json`` (``write_final``), so that a resumed trial re-reports it instead of training again,
and each finished member's best student as an MLflow model (``export_best``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from trainables.arrays.array_model import ArrayModel
from trainables.arrays.members import Member, slug
from trainables.arrays.optim import ArrayAdamW
from trainables.models.mlflow_export import DATA, write_mlflow_model
from trainables.models.student import Student, StudentConfig

FINAL_FILE = "final.json"


def save_state(path: Path, members: Sequence[Member], alive: Sequence[Member], step: int,
               model: ArrayModel, optimizer: ArrayAdamW) -> None:
    """Everything a bit-exact resume needs: weights, optimiser, schedules, every RNG stream;
    written to ``path.tmp`` and renamed, so a checkpoint is whole or absent."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    saved = {}
    for m in members:
        current = m.record.best_step == step and m in alive
        saved[m.key] = {
            "record": m.record.bookkeeping(), "schedule": m.schedule.state_dict(),
            "dropout": m.dropout.get_state(), "method_rng": m.method_rng.get_state(),
            # When the best is the current model (the usual case at an eval), don't write
            # the weights twice: a checkpoint of MiniLM shrinks by a quarter.
            "best_state": None if current else m.record.best_state, "best_is_model": current,
        }
    state = {"keys": [m.key for m in members], "alive": [m.key for m in alive],
             "step": step, "model": model.state_dict(),
             "optimizer": optimizer.state_dict(), "members": saved}
    torch.save(state, tmp / "state.pt")
    tmp.rename(path)


def read_state(path: Path, members: Sequence[Member]) -> dict[str, Any]:
    """The state ``save_state`` wrote in ``path``; refused when ``members`` (their keys and
    config hashes) are not the array that wrote it."""
    state = torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)
    mine = {m.key: m.record.config_hash for m in members}
    theirs = {k: v["record"]["config_hash"] for k, v in state["members"].items()}
    if mine != theirs:
        diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        raise ValueError(
            f"checkpoint {path} belongs to another array (members {diff[:3]} differ); resume "
            "with the members and configs that wrote it"
        )
    return state


def restore_members(saved: dict[str, Any], members: Sequence[Member], alive: Sequence[Member],
                    model: ArrayModel) -> None:
    """Each member's bookkeeping, schedule and random streams from a checkpoint's ``members``;
    ``model`` (the state already loaded) gives the best weights of the members whose best was
    the model when it was written."""
    for j_m in members:
        s = saved[j_m.key]
        j_m.record.restore(s["record"])
        j_m.schedule.load_state_dict(s["schedule"])
        j_m.dropout.set_state(s["dropout"])
        # checkpoints written before the stream's rename keep it under its old key
        j_m.method_rng.set_state(s["method_rng"] if "method_rng" in s else s["listmle"])
        j_m.record.best_state = s["best_state"]
    for j, m in enumerate(alive):
        if saved[m.key]["best_is_model"]:
            m.record.best_state = model.member_state(j)


def last_evaluation(alive: Sequence[Member], step: int) -> dict[str, Any]:
    """The report of the evaluation a checkpoint was written at, for a resumed run to send
    again: a driver killed before it logged that report would leave a hole in the curve."""
    members = []
    for m in alive:
        r = m.record
        if r.history and r.history[-1]["step"] == step:
            members.append({"key": m.key, "stsb_dev": r.history[-1]["stsb_dev"],
                            "best_stsb_dev": r.best, "best_step": r.best_step})
    return {"step": step, "members": members, "resumed": 1}


def export_best(root: Path, alive: Sequence[Member], members: Sequence[Member],
                student_configs: Sequence[StudentConfig], model: ArrayModel) -> dict[str, Path]:
    """Each finished member's best student as an MLflow model (``trainables.models.mlflow_export``)
    around a Hugging Face / sentence-transformers folder; key -> the MLflow model folder.
    ``student_configs``: one per member of ``members``, in order."""
    students: dict[StudentConfig, Student] = {}
    out = {}
    for j, m in enumerate(alive):
        sc = student_configs[members.index(m)]
        if sc not in students:
            students[sc] = Student(sc)
        student = students[sc]
        best = m.record.best_state or model.member_state(j)
        state = {**{f"encoder.{k}": v for k, v in best["encoder"].items()},
                 **{f"mlp.{k}": v for k, v in best["mlp"].items()}, **best["heads"]}
        missing, unexpected = student.load_state_dict(state, strict=False)
        if unexpected or any(not k.startswith("encoder.pooler.") for k in missing):
            raise RuntimeError(f"member {m.key}: weights do not fit the student "
                               f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
        folder = root / slug(m.key) / "model"
        student.save_pretrained(folder / DATA)
        out[m.key] = write_mlflow_model(folder)
    return out


def write_final(path: Path, finals: dict[str, dict[str, Any]], failed: dict[str, str],
                step: int) -> None:
    """The record of a finished array: a resumed run re-reports it instead of training again."""
    (path / FINAL_FILE).write_text(
        json.dumps({"final": finals, "failed": failed, "step": step}, sort_keys=True))


def read_final(path: Path) -> dict[str, Any] | None:
    f = Path(path) / FINAL_FILE
    return json.loads(f.read_text()) if f.is_file() else None
