"""SentEval's seven transfer tasks as SimCSE's ``evaluation.py`` runs them, without SentEval.

DALR reports, beside STS, the accuracy of a logistic-regression probe on frozen sentence
embeddings for MR, CR, SUBJ, MPQA, SST-2, TREC and MRPC (DALR Section 4, Table 2; its Table 3
prints the TR average). The papers ran SentEval through SimCSE's ``evaluation.py``: ``--mode test``
(here 'full') uses 10 folds and a probe trained with Adam, batch 64, tenacity 5, epoch size 4;
``--mode fasttest`` ('fast') 5 folds, RMSprop, batch 128, tenacity 3, epoch size 2. The probe and
its training are in ``trainables.evaluation.probe``; this module reads the tasks and runs SentEval's three
protocols (``senteval/tools/validation.py``), each choosing the L2 penalty among 1e-5..1e-2:

- MR, CR, SUBJ, MPQA (``InnerKFoldClassifier``): stratified k-fold over all samples; on each outer
  fold the penalty with the best mean accuracy over an inner stratified k-fold of its training
  part, then a refit on the whole training part (5% held out for early stopping), scored on the
  outer test fold; the task's accuracy is the mean over outer folds.
- SST-2 (``SplitClassifier``): each penalty trained on train with early stopping on dev; the best
  on dev is scored on test. SentEval then refits that penalty identically; the fit is reused.
- TREC (6 coarse classes) and MRPC (``KFoldClassifier``): stratified k-fold on train chooses the
  penalty, a refit on all of train (5% held out) is scored on test. MRPC's features are
  ``[|u - v|, u * v]`` of its two sentences' embeddings; its F1 is reported too.

Faithfulness details kept from SentEval:
  - Reading: MR, CR, SUBJ, MPQA as latin-1 with ``str.splitlines`` (empty lines are samples: CR has
    4, MPQA 3, and an empty sentence is embedded like any other); SST as UTF-8 ``sentence<TAB>label``;
    TREC as latin-1 ``COARSE:fine question``; MRPC as UTF-8, a header line (after a byte-order
    mark) then ``label<TAB>id<TAB>id<TAB>sentence1<TAB>sentence2``.
  - Sentences are whitespace-split and SimCSE's batcher re-joins them with ``' '``.
  - Samples are sorted as SentEval sorts them before embedding (token count, then label; MRPC by
    both counts, then label): the folds and every fit's data order index into that order.
  - Folds: scikit-learn's ``StratifiedKFold(shuffle=True)`` with random state 1111 (the seed for
    TREC/MRPC; SentEval hard-codes 1111 for the inner-k-fold tasks), the function SentEval calls,
    so the folds are SentEval's own. Selection scores are rounded to 2 decimals before the argmax
    (ties go to the smaller penalty), per-fold accuracies too, as SentEval rounds them.
  - Reported accuracy is SentEval's test ``acc`` (SimCSE prints it; DALR's copy of
    ``evaluation.py`` prints ``devacc`` instead, docs/official-code.md §6.6), x 100; "avg" is the
    mean over the tasks run. ``<task>/devacc`` gives the selection accuracy too.
Departures that do not change the numbers: every distinct sentence of a task is encoded once
(length-sorted batches); the fits of one selection step train as one batched model
(``trainables.evaluation.probe``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainables.evaluation.probe import (
    L2_GRID,
    SEED,
    VALIDATION_SPLIT,
    Fit,
    FitGroup,
    ProbeConfig,
    fit_many,
    probe_config,
)
from trainables.evaluation.sts import SentEvalDataError, encode_unique

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
BINARY_FILES = {  # task -> (label-1 file, label-0 file), SentEval's order
    "MR": ("MR/rt-polarity.pos", "MR/rt-polarity.neg"),
    "CR": ("CR/custrev.pos", "CR/custrev.neg"),
    "SUBJ": ("SUBJ/subj.objective", "SUBJ/subj.subjective"),
    "MPQA": ("MPQA/mpqa.pos", "MPQA/mpqa.neg"),
}
TASK_FILES: dict[str, tuple[str, ...]] = {
    **BINARY_FILES,
    "SST2": ("SST/binary/sentiment-train", "SST/binary/sentiment-dev", "SST/binary/sentiment-test"),
    "TREC": ("TREC/train_5500.label", "TREC/TREC_10.label"),
    "MRPC": ("MRPC/msr_paraphrase_train.txt", "MRPC/msr_paraphrase_test.txt"),
}
"""every file a task reads, relative to SentEval's ``downstream`` folder"""
TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
MRPC_HEADER = "Quality"
_FIX = ("pass the SentEval 'downstream' folder holding MR/, CR/, SUBJ/, MPQA/, SST/binary/, TREC/ "
        "and MRPC/ (what SentEval's data/get_transfer_data.bash writes)")
_REFETCH = "fix the line or re-download the file (SentEval's data/get_transfer_data.bash)"


@dataclass(frozen=True, eq=False)
class Samples:
    """One split of a task in SentEval's order; sentences already whitespace-normalised."""

    sent1: tuple[str, ...]
    labels: np.ndarray
    sent2: tuple[str, ...] | None = None
    """MRPC's second sentences"""

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True, eq=False)
class TransferTask:
    name: str
    protocol: str
    """'innerkfold' (MR, CR, SUBJ, MPQA), 'split' (SST2) or 'kfold' (TREC, MRPC)"""
    nclasses: int
    train: Samples
    """all samples for 'innerkfold'"""
    valid: Samples | None = None
    test: Samples | None = None
    files: tuple[Path, ...] = ()

    def sentences(self) -> list[str]:
        out: list[str] = []
        for s in (self.train, self.valid, self.test):
            if s is not None:
                out += [*s.sent1, *(s.sent2 or ())]
        return out

    @property
    def n_samples(self) -> int:
        return sum(len(s) for s in (self.train, self.valid, self.test) if s is not None)


@dataclass(frozen=True)
class TaskResult:
    """SentEval's result of one task: accuracies x 100 rounded to 2 decimals as SentEval rounds."""

    acc: float
    """test accuracy (SentEval's 'acc')"""
    devacc: float
    """selection accuracy: inner-fold / fold / dev mean of the chosen penalty (SentEval's 'devacc')"""
    l2regs: tuple[float, ...]
    """the penalty chosen (one per outer fold for the inner-k-fold tasks)"""
    n_fits: int
    f1: float | None = None
    """MRPC only: test F1 x 100 of the paraphrase class"""
    extra: dict[str, Any] = field(default_factory=dict)


# --- reading --------------------------------------------------------------------------------
def resolve_transfer_dir(data_dir: str | Path) -> Path:
    """Accept the 'downstream' folder or its parent (SentEval's ``data/``)."""
    root = Path(data_dir)
    names = {p.split("/")[0] for files in TASK_FILES.values() for p in files}
    if not any((root / n).is_dir() for n in names) and (root / "downstream").is_dir():
        root = root / "downstream"
    if not root.is_dir():
        raise SentEvalDataError(f"SentEval data folder {root} does not exist; {_FIX}")
    return root


def _path(root: Path, rel: str, task: str) -> Path:
    path = root / rel
    if not path.is_file():
        what = "folder" if not path.parent.is_dir() else "file"
        missing = path.parent.relative_to(root) if what == "folder" else rel
        raise SentEvalDataError(f"{task}: {what} {missing} not found under {root}; {_FIX}")
    return path


def _read(path: Path, encoding: str) -> str:
    """Text with universal newlines (as ``io.open``); undecodable bytes name their line."""
    raw = path.read_bytes()
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SentEvalDataError(
            f"{path}:{line}: not valid {encoding.upper()} (byte {raw[e.start]:#04x}); SentEval reads "
            f"this file as {encoding.upper()}: re-download it"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _lines(path: Path, encoding: str) -> list[str]:
    """The lines ``for line in io.open(path)`` yields, without their newline."""
    text = _read(path, encoding)
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _sorted(tokens: list[list[str]], labels: list[int], tokens2: list[list[str]] | None = None) -> Samples:
    """SentEval's order: by token count(s), then label; stable."""
    if tokens2 is None:
        order = sorted(range(len(labels)), key=lambda i: (len(tokens[i]), labels[i]))
    else:
        order = sorted(range(len(labels)), key=lambda i: (len(tokens[i]), len(tokens2[i]), labels[i]))
    return Samples(
        sent1=tuple(" ".join(tokens[i]) for i in order),
        labels=np.array([labels[i] for i in order], dtype=np.int64),
        sent2=None if tokens2 is None else tuple(" ".join(tokens2[i]) for i in order),
    )


def _load_binary(root: Path, task: str) -> TransferTask:
    files = [_path(root, rel, task) for rel in BINARY_FILES[task]]
    tokens: list[list[str]] = []
    labels: list[int] = []
    for path, label in zip(files, (1, 0), strict=True):
        # SentEval: f.read().splitlines(), every line a sample (empty ones included)
        lines = _read(path, "latin-1").splitlines()
        if not lines:
            raise SentEvalDataError(f"{path}: empty file, {task} needs its sentences one per line; "
                                    "re-download the file")
        tokens += [line.split() for line in lines]
        labels += [label] * len(lines)
    return TransferTask(task, "innerkfold", 2, _sorted(tokens, labels), files=tuple(files))


def _int_label(text: str, path: Path, lineno: int, allowed: Sequence[int]) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value not in allowed:
        raise SentEvalDataError(f"{path}:{lineno}: label {text!r} is not one of "
                                f"{', '.join(map(str, allowed))}; {_REFETCH}")
    return value


def _load_sst_file(path: Path) -> Samples:
    tokens, labels = [], []
    for i, line in enumerate(_lines(path, "utf-8"), start=1):
        fields = line.strip().split("\t")
        if len(fields) != 2:
            raise SentEvalDataError(f"{path}:{i}: {len(fields)} tab-separated fields, expected 2 "
                                    f"(sentence, label); {_REFETCH}")
        labels.append(_int_label(fields[1], path, i, (0, 1)))
        tokens.append(fields[0].split())
    if not labels:
        raise SentEvalDataError(f"{path}: empty file; re-download SST/binary")
    return _sorted(tokens, labels)


def _load_sst(root: Path) -> TransferTask:
    files = [_path(root, rel, "SST2") for rel in TASK_FILES["SST2"]]
    train, dev, test = (_load_sst_file(p) for p in files)
    if len(set(train.labels.tolist())) < 2:
        raise SentEvalDataError(f"{files[0]}: only one class in the training set; re-download SST/binary")
    return TransferTask("SST2", "split", 2, train, dev, test, files=tuple(files))


def _load_trec_file(path: Path) -> Samples:
    tokens, labels = [], []
    for i, line in enumerate(_lines(path, "latin-1"), start=1):
        target, colon, rest = line.strip().partition(":")
        fine, space, question = rest.partition(" ")
        if not colon or not space or target not in TREC_CLASSES:
            raise SentEvalDataError(
                f"{path}:{i}: expected 'COARSE:fine question' with COARSE one of "
                f"{', '.join(TREC_CLASSES)}, got {line[:40]!r}; {_REFETCH}")
        tokens.append(question.split())
        labels.append(TREC_CLASSES.index(target))
    if not labels:
        raise SentEvalDataError(f"{path}: empty file; re-download TREC")
    return _sorted(tokens, labels)


def _load_trec(root: Path) -> TransferTask:
    files = [_path(root, rel, "TREC") for rel in TASK_FILES["TREC"]]
    train, test = (_load_trec_file(p) for p in files)
    return TransferTask("TREC", "kfold", len(TREC_CLASSES), train, None, test, files=tuple(files))


def _load_mrpc_file(path: Path) -> Samples:
    lines = _lines(path, "utf-8")
    header = lines[0].strip().split("\t") if lines else [""]
    if header[0].lstrip("\ufeff") != MRPC_HEADER:
        raise SentEvalDataError(
            f"{path}:1: expected the header line 'Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String<TAB>#2 "
            f"String' (SentEval skips the first line), got {lines[0][:40] if lines else ''!r}; "
            "re-download the file")
    a, b, labels = [], [], []
    for i, line in enumerate(lines[1:], start=2):
        fields = line.strip().split("\t")
        if len(fields) != 5:
            raise SentEvalDataError(f"{path}:{i}: {len(fields)} tab-separated fields, expected 5 "
                                    f"(Quality, #1 ID, #2 ID, #1 String, #2 String); {_REFETCH}")
        labels.append(_int_label(fields[0], path, i, (0, 1)))
        a.append(fields[3].split())
        b.append(fields[4].split())
    if not labels:
        raise SentEvalDataError(f"{path}: no sentence pairs after the header; re-download MRPC")
    return _sorted(a, labels, b)


def _load_mrpc(root: Path) -> TransferTask:
    files = [_path(root, rel, "MRPC") for rel in TASK_FILES["MRPC"]]
    train, test = (_load_mrpc_file(p) for p in files)
    return TransferTask("MRPC", "kfold", 2, train, None, test, files=tuple(files))


def load_task(data_dir: str | Path, task: str) -> TransferTask:
    """Read one task as SentEval does; ``SentEvalDataError`` names the file, the line and the fix."""
    root = resolve_transfer_dir(data_dir)
    if task in BINARY_FILES:
        return _load_binary(root, task)
    loaders = {"SST2": _load_sst, "TREC": _load_trec, "MRPC": _load_mrpc}
    if task not in loaders:
        raise ValueError(f"unknown transfer task {task!r}; choose from {', '.join(TRANSFER_TASKS)}")
    return loaders[task](root)


def _check_tasks(tasks: Sequence[str]) -> tuple[str, ...]:
    tasks = tuple(tasks)
    unknown = [t for t in tasks if t not in TRANSFER_TASKS]
    if unknown or not tasks:
        raise ValueError(f"unknown transfer task(s) {unknown or list(tasks)}; choose from "
                         f"{', '.join(TRANSFER_TASKS)}")
    return tasks


def _check_sizes(task: TransferTask, probe: ProbeConfig) -> None:
    """Enough samples per class for the folds and the 5% early-stopping split of the refits."""
    k = probe.kfold
    if task.protocol == "split":
        return
    counts = np.bincount(task.train.labels, minlength=task.nclasses)
    # inner k-fold: each outer training part must still hold k of each class
    need = 2 * k if task.protocol == "innerkfold" else k
    refit = len(task.train) * (k - 1) / k if task.protocol == "innerkfold" else len(task.train)
    short = [i for i, n in enumerate(counts) if n < need]
    if short or int(VALIDATION_SPLIT * refit) < 1:
        where = task.files[0] if task.protocol == "kfold" else task.files[0].parent
        raise SentEvalDataError(
            f"{where}: {task.name} has {counts.tolist()} samples per class, {probe.name} mode "
            f"({k}-fold) needs at least {need} of each and {math.ceil(1 / VALIDATION_SPLIT)} in a "
            "refit; the data is truncated, re-download it")


def check_transfer(data_dir: str | Path, tasks: Sequence[str] = TRANSFER_TASKS,
                   mode: str | ProbeConfig = "full") -> str:
    """Open and parse every file ``evaluate_transfer`` will read for ``tasks``, embedding nothing.

    One ``SentEvalDataError`` line names the file (and line), the problem and the fix: a missing
    task folder or file, a malformed line, a wrong column count, a label out of range, a file too
    small for the folds of ``mode``. Returns a one-line summary.
    """
    return check_transfer_files(data_dir, tasks, mode)[-1]


def check_transfer_files(data_dir: str | Path, tasks: Sequence[str] = TRANSFER_TASKS,
                         mode: str | ProbeConfig = "full") -> list[str]:
    """``check_transfer``, saying what was checked: one line per task naming its files, then
    the summary (what a dry run prints)."""
    probe = probe_config(mode)
    root = resolve_transfer_dir(data_dir)
    lines, n_files, n_samples = [], 0, 0
    for name in _check_tasks(tasks):
        task = load_task(root, name)
        _check_sizes(task, probe)
        n_files += len(task.files)
        n_samples += task.n_samples
        files = ", ".join(str(f.relative_to(root)) for f in task.files)
        lines.append(f"transfer {name} ({probe.name} mode): {files}: {task.n_samples} samples, "
                     f"{task.nclasses} classes")
    lines.append(f"SentEval transfer {root}: {len(tasks)} tasks, {n_files} files, {n_samples} "
                 "samples")
    return lines


def transfer_files(data_dir: str | Path, tasks: Sequence[str] = TRANSFER_TASKS) -> list[Path]:
    """The files a run of ``tasks`` reads (whether or not they exist), for a dry run to list."""
    root = resolve_transfer_dir(data_dir) if Path(data_dir).is_dir() else Path(data_dir)
    return [root / rel for t in _check_tasks(tasks) for rel in TASK_FILES[t]]


# --- the protocols --------------------------------------------------------------------------
def _round2(x: float) -> float:
    return float(np.round(x, 2))


def _stratified_folds(labels: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    # scikit-learn's StratifiedKFold is what SentEval calls: the same folds, not a look-alike.
    from sklearn.model_selection import StratifiedKFold

    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return list(skf.split(np.zeros((len(labels), 1)), labels))


def _select(fits_by_fold: Sequence[Sequence[Fit]]) -> tuple[int, float]:
    """SentEval's penalty choice: mean validation accuracy per penalty over the folds, x 100 and
    rounded to 2 decimals, first maximum -> (penalty index, its score)."""
    scores = [_round2(100 * np.mean([fold[r].valid_acc for fold in fits_by_fold]))
              for r in range(len(fits_by_fold[0]))]
    best = int(np.argmax(scores))
    return best, scores[best]


def _accuracy(fit: Fit, x, y) -> tuple[float, Any]:
    pred = fit.predict(x)
    return float((pred == y).double().mean()), pred


def _inner_kfold(task: TransferTask, x, y, probe: ProbeConfig, seed: int) -> TaskResult:
    labels = task.train.labels
    outer = _stratified_folds(labels, probe.kfold, SEED)  # SentEval hard-codes 1111 here
    groups = []
    for tr, _ in outer:
        for itr, ite in _stratified_folds(labels[tr], probe.kfold, SEED):
            groups.append(FitGroup(tr[itr], tr[ite], L2_GRID))
    fits = fit_many(x, y, task.nclasses, groups, probe, seed)
    k = probe.kfold
    regs, devs = [], []
    for o in range(len(outer)):
        r, score = _select(fits[o * k : (o + 1) * k])
        regs.append(L2_GRID[r])
        devs.append(score)
    refits = fit_many(x, y, task.nclasses,
                      [FitGroup(tr, None, (reg,)) for (tr, _), reg in zip(outer, regs, strict=True)],
                      probe, seed)
    tests = [round(100 * _accuracy(f[0], x[te], y[te])[0], 2)
             for f, (_, te) in zip(refits, outer, strict=True)]
    return TaskResult(acc=_round2(np.mean(tests)), devacc=_round2(np.mean(devs)), l2regs=tuple(regs),
                      n_fits=len(groups) * len(L2_GRID) + len(refits),
                      extra={"fold_acc": tests, "fold_devacc": devs})


def _kfold(task: TransferTask, x, y, n_train: int, probe: ProbeConfig, seed: int) -> tuple[TaskResult, Any]:
    folds = _stratified_folds(task.train.labels, probe.kfold, seed)
    fits = fit_many(x, y, task.nclasses, [FitGroup(tr, te, L2_GRID) for tr, te in folds], probe, seed)
    r, devacc = _select(fits)
    [[refit]] = fit_many(x, y, task.nclasses, [FitGroup(np.arange(n_train), None, (L2_GRID[r],))],
                         probe, seed)
    acc, pred = _accuracy(refit, x[n_train:], y[n_train:])
    return TaskResult(acc=round(100 * acc, 2), devacc=devacc, l2regs=(L2_GRID[r],),
                      n_fits=len(folds) * len(L2_GRID) + 1), pred


def _split(task: TransferTask, x, y, probe: ProbeConfig, seed: int) -> TaskResult:
    n_tr, n_va = len(task.train), len(task.valid)
    (fits,) = fit_many(x, y, task.nclasses,
                       [FitGroup(np.arange(n_tr), np.arange(n_tr, n_tr + n_va), L2_GRID)], probe, seed)
    scores = [round(100 * f.valid_acc, 2) for f in fits]
    r = int(np.argmax(scores))
    # SentEval refits the chosen penalty with the same seed, rows and validation set: the same fit.
    acc, _ = _accuracy(fits[r], x[n_tr + n_va :], y[n_tr + n_va :])
    return TaskResult(acc=round(100 * acc, 2), devacc=scores[r], l2regs=(L2_GRID[r],), n_fits=len(fits))


def probe_task(task: TransferTask, embed: Callable[[Sequence[str]], np.ndarray],
               mode: str | ProbeConfig = "full", seed: int = SEED) -> TaskResult:
    """Run SentEval's protocol of ``task`` on the embeddings ``embed(sentences) -> (n, dim)``."""
    import torch

    probe = probe_config(mode)
    _check_sizes(task, probe)
    parts = [s for s in (task.train, task.valid, task.test) if s is not None]
    feats = []
    for s in parts:
        a = np.asarray(embed(s.sent1), dtype=np.float32)
        if s.sent2 is not None:  # MRPC: SentEval's np.c_[|u - v|, u * v], in float32
            b = np.asarray(embed(s.sent2), dtype=np.float32)
            a = np.c_[np.abs(a - b), a * b]
        feats.append(a)
    x = torch.from_numpy(np.concatenate(feats)).float()
    y = torch.from_numpy(np.concatenate([s.labels for s in parts]))
    if task.protocol == "innerkfold":
        return _inner_kfold(task, x, y, probe, seed)
    if task.protocol == "split":
        return _split(task, x, y, probe, seed)
    res, pred = _kfold(task, x, y, len(task.train), probe, seed)
    if task.name == "MRPC":
        truth = task.test.labels
        pred = pred.numpy()
        tp = int(((pred == 1) & (truth == 1)).sum())
        f1 = 2 * tp / max(1, 2 * tp + int(((pred == 1) & (truth == 0)).sum())
                          + int(((pred == 0) & (truth == 1)).sum()))
        res = TaskResult(res.acc, res.devacc, res.l2regs, res.n_fits, f1=round(100 * f1, 2))
    return res


# --- evaluation -----------------------------------------------------------------------------
def _task_keys(name: str, res: TaskResult, seconds: float) -> dict[str, float]:
    out = {name: res.acc, f"{name}/devacc": res.devacc, f"{name}/seconds": seconds}
    if res.f1 is not None:
        out[f"{name}/f1"] = res.f1
    return out


def _finish(out: dict[str, Any], tasks: Sequence[str], probe: ProbeConfig) -> dict[str, Any]:
    out["avg"] = float(np.mean([out[t] for t in tasks]))
    out["devacc_avg"] = float(np.mean([out[f"{t}/devacc"] for t in tasks]))
    out["mode"] = probe.name
    out["primary_metric"] = "avg"
    return out


def _load_all(data_dir: str | Path, tasks: Sequence[str], probe: ProbeConfig,
              on_task: Callable[[str, int, int], None] | None = None) -> Iterator[TransferTask]:
    """Every task loaded and validated before any is encoded; then each in turn, ``on_task``
    told as it starts."""
    loaded = [load_task(data_dir, t) for t in _check_tasks(tasks)]
    for task in loaded:
        _check_sizes(task, probe)
    for i, task in enumerate(loaded, 1):
        if on_task is not None:
            on_task(task.name, i, len(loaded))
        yield task


def evaluate_transfer(
    encode: Callable[[list[str]], Any],
    data_dir: str | Path,
    tasks: Sequence[str] = TRANSFER_TASKS,
    mode: str | ProbeConfig = "full",
    batch_size: int = 128,
    seed: int = SEED,
    on_task: Callable[[str, int, int], None] | None = None,
) -> dict[str, float | str]:
    """Score ``encode`` (list[str] -> 2-D array or tensor) on the transfer tasks, accuracy x 100.

    Keys: each task in ``tasks`` (SentEval's test 'acc'), ``<task>/devacc`` (the selection
    accuracy), ``<task>/seconds`` (encoding and probes), ``MRPC/f1``, "avg" (mean accuracy of the
    tasks run: DALR's TR Avg when all seven are run), "devacc_avg", "mode" ('full' or 'fast') and
    "primary_metric" = "avg". ``on_task(name, i, n)`` hears each task as it starts (i of n, from 1).
    """
    probe = probe_config(mode)
    out: dict[str, Any] = {}
    for task in _load_all(data_dir, tasks, probe, on_task):
        t0 = time.perf_counter()
        emb, row = encode_unique(encode, task.sentences(), batch_size)
        if emb.ndim == 3:
            raise ValueError("encode returned (members, n, dim); use evaluate_transfer_many for an array")
        res = probe_task(task, lambda s, e=emb, r=row: e[[r[x] for x in s]], probe, seed)
        out.update(_task_keys(task.name, res, time.perf_counter() - t0))
    return _finish(out, tasks, probe)


def evaluate_transfer_many(
    encode: Callable[[list[str]], Any],
    data_dir: str | Path,
    tasks: Sequence[str] = TRANSFER_TASKS,
    mode: str | ProbeConfig = "full",
    batch_size: int = 128,
    seed: int = SEED,
    on_task: Callable[[str, int, int], None] | None = None,
) -> list[dict[str, float | str]]:
    """``evaluate_transfer`` for the M members of an array: ``encode`` returns (M, n, dim), every
    sentence is encoded once for all members, and each member's probes are trained on its own
    embeddings alone (a member's figures do not depend on its array). One dict per member;
    ``on_task`` as in ``evaluate_transfer``."""
    probe = probe_config(mode)
    outs: list[dict[str, Any]] | None = None
    for task in _load_all(data_dir, tasks, probe, on_task):
        t0 = time.perf_counter()
        emb, row = encode_unique(encode, task.sentences(), batch_size)
        if emb.ndim != 3:
            raise ValueError(f"encode must return (members, n_sentences, dim), got {emb.shape[1:]} rows")
        t_enc = time.perf_counter() - t0
        outs = outs if outs is not None else [{} for _ in range(len(emb))]
        for e, out in zip(emb, outs, strict=True):
            t1 = time.perf_counter()
            res = probe_task(task, lambda s, e=e, r=row: e[[r[x] for x in s]], probe, seed)
            out.update(_task_keys(task.name, res, t_enc / len(emb) + time.perf_counter() - t1))
    return [_finish(o, tasks, probe) for o in outs or []]
