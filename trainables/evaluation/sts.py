"""STS evaluation as SentEval runs it for MCSE / KDMCSE / DALR, without SentEval.

What the three repos report (docs/official-code.md §7.1): Spearman x 100 between
gold scores and the cosine of two sentence embeddings on STS12-16 (the "all" setting: the pairs of
every subset of a year concatenated, one Spearman), STS-B test and SICK-R test; "Avg." is the mean
of the seven. Training-time model selection reads STS-B dev only (docs/official-code.md §2.3).

Faithfulness details kept from SentEval's ``sts.py``:
  - STS12-16 lines are split with ``str.splitlines`` and pairs whose gold line is blank are dropped;
    STS-B / SICK lines are iterated, ``strip``-ped and split on tabs (SICK skips its header).
  - Sentences are whitespace-split and the batcher re-joins them with ``' '``, so an encoder sees
    ``' '.join(s.split())``; the similarity is the cosine with ``nan_to_num`` on both sides.
  - Alignment / uniformity (Wang and Isola) on STS-B dev: MCSE's modified ``sts.py`` (default)
    computes them per batch of 128 in file order, alignment over pairs with gold >= 4.0 (a batch
    without any contributes 0) and uniformity over *all* 2B embeddings of the batch (both sides,
    duplicates included), then averages the batch values; DALR's ``sts.py`` uses the whole set with
    gold > 4 and all 2N embeddings (docs/official-code.md §7.3).
Departures that do not change the numbers: NumPy >= 1.24 safe (no ragged arrays); every unique
sentence is encoded once (length-sorted batches) instead of once per occurrence.

``DevEvaluator`` is the cheap training-time check: STS-B dev tokenised once, only dev encoded
(the official loop encodes train, dev and test every 125 steps and reads dev).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

STS_SUBSETS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),  # SentEval's STS13 has no SMT (licence)
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
ALL_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
_FIX = "pass the SentEval 'downstream' folder (the one holding STS/ and SICK/)"


class SentEvalDataError(ValueError):
    """The SentEval data folder is missing a file or a file is malformed."""


@dataclass(frozen=True, eq=False)
class PairSet:
    """Sentence pairs and gold scores of one file, sentences already whitespace-normalised."""

    name: str
    sent1: tuple[str, ...]
    sent2: tuple[str, ...]
    gold: np.ndarray


def _norm_ws(s: str) -> str:
    # SentEval stores s.split() and its batcher does ' '.join(tokens).
    return " ".join(s.split())


def _to_float(text: str, path: Path, lineno: int) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise SentEvalDataError(
            f"{path}:{lineno}: gold score {text!r} is not a number; fix or re-download the file"
        )
    return value


def resolve_data_dir(data_dir: str | Path) -> Path:
    """Accept the 'downstream' folder or its parent (SentEval's ``data/``)."""
    root = Path(data_dir)
    if not (root / "STS").is_dir() and (root / "downstream" / "STS").is_dir():
        root = root / "downstream"
    if not root.is_dir():
        raise SentEvalDataError(f"SentEval data folder {root} does not exist; {_FIX}")
    return root


def _require(path: Path, task: str, root: Path) -> Path:
    if not path.is_file():
        rel = path.relative_to(root)
        raise SentEvalDataError(f"{task} not found under {root}: expected {rel}; {_FIX}")
    return path


def load_sts_year(data_dir: str | Path, task: str) -> list[PairSet]:
    """STS12..16: one PairSet per subset, blank-gold pairs dropped (SentEval ``STSEval.loadFile``)."""
    root = resolve_data_dir(data_dir)
    folder = root / "STS" / f"{task}-en-test"
    out = []
    for subset in STS_SUBSETS[task]:
        inp = _require(folder / f"STS.input.{subset}.txt", task, root)
        gs = _require(folder / f"STS.gs.{subset}.txt", task, root)
        lines = inp.read_text(encoding="utf8").splitlines()
        golds = gs.read_text(encoding="utf8").splitlines()
        if len(lines) != len(golds):
            raise SentEvalDataError(
                f"{inp}: {len(lines)} sentence pairs but {gs.name} has {len(golds)} gold lines; "
                "re-download the data"
            )
        s1, s2, g = [], [], []
        for i, (line, gold) in enumerate(zip(lines, golds, strict=True), start=1):
            fields = line.split("\t")
            if len(fields) != 2:
                raise SentEvalDataError(
                    f"{inp}:{i}: {len(fields)} tab-separated fields, expected 2 (sentence1, sentence2)"
                )
            if gold.strip() == "":
                continue  # unscored pair: SentEval drops it
            s1.append(_norm_ws(fields[0]))
            s2.append(_norm_ws(fields[1]))
            g.append(_to_float(gold, gs, i))
        out.append(PairSet(f"{task}/{subset}", tuple(s1), tuple(s2), np.asarray(g, dtype=np.float64)))
    return out


def _load_tsv(path: Path, name: str, cols: tuple[int, int, int], skip_header: bool) -> PairSet:
    """STS-B (score, s1, s2 = columns 4, 5, 6) and SICK (3, 1, 2 after a header), as SentEval reads."""
    s1, s2, g = [], [], []
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if skip_header and i == 1:
                continue
            text = line.strip().split("\t")
            if len(text) <= max(cols):
                raise SentEvalDataError(
                    f"{path}:{i}: {len(text)} tab-separated fields, expected at least {max(cols) + 1}"
                )
            g.append(_to_float(text[cols[0]], path, i))
            s1.append(_norm_ws(text[cols[1]]))
            s2.append(_norm_ws(text[cols[2]]))
    return PairSet(name, tuple(s1), tuple(s2), np.asarray(g, dtype=np.float64))


def load_stsb(data_dir: str | Path, split: str = "test") -> PairSet:
    root = resolve_data_dir(data_dir)
    path = _require(root / "STS" / "STSBenchmark" / f"sts-{split}.csv", "STSBenchmark", root)
    return _load_tsv(path, f"STSBenchmark/{split}", (4, 5, 6), skip_header=False)


def load_sick(data_dir: str | Path) -> PairSet:
    """SICK-R test only (the trial split is not scored by the protocol and may be absent)."""
    root = resolve_data_dir(data_dir)
    path = _require(root / "SICK" / "SICK_test_annotated.txt", "SICKRelatedness", root)
    return _load_tsv(path, "SICKRelatedness/test", (3, 1, 2), skip_header=True)


def _as_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor, without importing torch here
        x = x.detach().float().cpu().numpy()
    return np.asarray(x)


def encode_unique(
    encode: Callable[[list[str]], Any], sentences: Sequence[str], batch_size: int = 128
) -> tuple[np.ndarray, dict[str, int]]:
    """Encode each distinct sentence once, in length-sorted batches -> (embeddings, row of each).

    ``encode`` returns (n, dim) for one model, or (M, n, dim) for M members of an array; the
    embeddings are then (n_unique, dim) or (M, n_unique, dim).
    """
    uniq = sorted(set(sentences), key=lambda s: (len(s), s))  # similar lengths -> little padding
    chunks, shape = [], None
    for start in range(0, len(uniq), batch_size):
        batch = uniq[start : start + batch_size]
        emb = _as_numpy(encode(list(batch)))
        ok = emb.ndim in (2, 3) and emb.shape[-2] == len(batch)
        if not ok or (shape is not None and (emb.ndim, emb.shape[:-2], emb.shape[-1]) != shape):
            raise ValueError(
                f"encode returned shape {emb.shape} for {len(batch)} sentences; it must return a "
                "2-D (n_sentences, dim) array, or (members, n_sentences, dim), the same every call"
            )
        shape = (emb.ndim, emb.shape[:-2], emb.shape[-1])
        chunks.append(emb.astype(np.float64))
    if not chunks:
        return np.zeros((0, 0)), {}
    return np.concatenate(chunks, axis=-2), {s: i for i, s in enumerate(uniq)}


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine, SentEval style: NaN inputs -> 0 and a zero vector gives similarity 0."""
    a, b = np.nan_to_num(a), np.nan_to_num(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return np.nan_to_num(cos)


def spearman100(sys_scores: np.ndarray, gold: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if len(gold) < 2:
        return math.nan
    return float(spearmanr(sys_scores, gold)[0]) * 100.0


def _l2n(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)  # F.normalize's eps


def _log_mean_exp_pdist(x: np.ndarray, t: float = 2.0) -> float:
    """log mean_{i<j} exp(-t ||x_i - x_j||^2) over normalised rows (torch.pdist pairs)."""
    if len(x) < 2:
        return math.nan
    xn = _l2n(x)
    iu = np.triu_indices(len(xn), k=1)
    sq = np.maximum(2.0 - 2.0 * (xn @ xn.T)[iu], 0.0)  # ||a-b||^2 = 2 - 2 a.b for unit rows
    return float(np.log(np.mean(np.exp(-t * sq))))


def alignment_uniformity(
    emb1: np.ndarray, emb2: np.ndarray, gold: np.ndarray, mode: str = "mcse", batch_size: int = 128
) -> tuple[float, float]:
    """Wang and Isola's l_align / l_uniform on a pair set, as MCSE ('mcse') or DALR ('dalr') compute it.

    l_align = E ||f(x) - f(y)||^2 over positive pairs; l_uniform = log E exp(-2 ||f(x) - f(y)||^2).
    'mcse': per batch (gold >= 4.0; a batch without positives counts as 0), mean of batch values.
    'dalr': whole set (gold > 4) and all 2N embeddings.
    """
    e1, e2, g = _l2n(np.asarray(emb1, np.float64)), _l2n(np.asarray(emb2, np.float64)), np.asarray(gold)
    if mode == "dalr":
        pos = g > 4
        align = float(((e1[pos] - e2[pos]) ** 2).sum(1).mean()) if pos.any() else math.nan
        return align, _log_mean_exp_pdist(np.concatenate([e1, e2]))
    if mode != "mcse":
        raise ValueError(f"alignment/uniformity mode {mode!r} unknown; use 'mcse' or 'dalr'")
    aligns, unifs = [], []
    for s in range(0, len(g), batch_size):
        b1, b2, pos = e1[s : s + batch_size], e2[s : s + batch_size], g[s : s + batch_size] >= 4.0
        aligns.append(float(((b1[pos] - b2[pos]) ** 2).sum(1).mean()) if pos.any() else 0.0)
        unifs.append(_log_mean_exp_pdist(np.concatenate([b1, b2])))
    return float(np.mean(aligns)), float(np.mean(unifs))


def _load_sets(data_dir: str | Path, tasks: Sequence[str]) -> dict[str, list[PairSet]]:
    unknown = [t for t in tasks if t not in ALL_TASKS]
    if unknown or not tasks:
        raise ValueError(f"unknown STS task(s) {unknown or tasks!r}; choose from {ALL_TASKS}")
    sets: dict[str, list[PairSet]] = {}
    for task in tasks:
        if task in STS_SUBSETS:
            sets[task] = load_sts_year(data_dir, task)
        elif task == "STSBenchmark":
            sets[task] = [load_stsb(data_dir, "test")]
            sets["STSBenchmark_dev"] = [load_stsb(data_dir, "dev")]
        else:
            sets[task] = [load_sick(data_dir)]
    return sets


def check_senteval(data_dir: str | Path) -> str:
    """Open and parse every file ``evaluate_sts`` and ``DevEvaluator`` will read, before any run.

    One ``SentEvalDataError`` line names the file, the problem and the fix: a missing file, a
    malformed line, or a file with fewer than two scored pairs (Spearman needs two; an empty
    ``sts-dev.csv`` would make every dev score NaN). Returns a one-line summary.
    """
    root = resolve_data_dir(data_dir)
    sets = _load_sets(root, ALL_TASKS)  # STS12-16 subsets, STS-B test and dev, SICK-R test
    files = {"STSBenchmark_dev": root / "STS" / "STSBenchmark" / "sts-dev.csv",
             "STSBenchmark": root / "STS" / "STSBenchmark" / "sts-test.csv",
             "SICKRelatedness": root / "SICK" / "SICK_test_annotated.txt"}
    n_files = n_pairs = 0
    for key, group in sets.items():
        for ps in group:
            n_files += 1
            n_pairs += len(ps.gold)
            if len(ps.gold) < 2:
                task, _, subset = ps.name.partition("/")
                path = files.get(key) or root / "STS" / f"{task}-en-test" / f"STS.gs.{subset}.txt"
                raise SentEvalDataError(
                    f"{path}: {len(ps.gold)} scored sentence pairs, Spearman needs at least 2; "
                    "the file is empty or truncated, re-download SentEval's data"
                )
    return f"SentEval {root}: {n_files} files, {n_pairs} scored pairs"


def _score(emb: np.ndarray, row: dict[str, int], sets: dict[str, list[PairSet]],
           tasks: Sequence[str], align_mode: str | None) -> dict[str, float | str]:
    def pair_emb(ps: PairSet) -> tuple[np.ndarray, np.ndarray]:
        return emb[[row[s] for s in ps.sent1]], emb[[row[s] for s in ps.sent2]]

    out: dict[str, float | str] = {}
    for key, group in sets.items():
        sys_all, gold_all = [], []
        for ps in group:
            a, b = pair_emb(ps)
            sys_scores = cosine_rows(a, b)
            if key in STS_SUBSETS:
                out[ps.name] = spearman100(sys_scores, ps.gold)
            sys_all.append(sys_scores)
            gold_all.append(ps.gold)
        out[key] = spearman100(np.concatenate(sys_all), np.concatenate(gold_all))
    if "STSBenchmark_dev" in sets and align_mode is not None:
        dev = sets["STSBenchmark_dev"][0]
        a, b = pair_emb(dev)
        out["alignment"], out["uniformity"] = alignment_uniformity(a, b, dev.gold, mode=align_mode)
    out["avg"] = float(np.mean([out[t] for t in tasks]))
    out["primary_metric"] = "avg"
    return out


def evaluate_sts_many(
    encode: Callable[[list[str]], Any],
    data_dir: str | Path,
    tasks: Sequence[str] = ALL_TASKS,
    batch_size: int = 128,
    align_mode: str | None = "mcse",
) -> list[dict[str, float | str]]:
    """``evaluate_sts`` for the M members of an array at once: ``encode`` returns (M, n, dim)
    and every sentence is encoded once for all members. One result dict per member."""
    if align_mode not in (None, "mcse", "dalr"):
        raise ValueError(f"align_mode {align_mode!r} unknown; use 'mcse', 'dalr' or None")
    sets = _load_sets(data_dir, tasks)  # load (and validate) everything before encoding anything
    every = [s for group in sets.values() for ps in group for s in (*ps.sent1, *ps.sent2)]
    emb, row = encode_unique(encode, every, batch_size)
    if emb.ndim != 3:
        raise ValueError(f"encode must return (members, n_sentences, dim), got {emb.shape[1:]} rows")
    return [_score(e, row, sets, tasks, align_mode) for e in emb]


def evaluate_sts(
    encode: Callable[[list[str]], Any],
    data_dir: str | Path,
    tasks: Sequence[str] = ALL_TASKS,
    batch_size: int = 128,
    align_mode: str | None = "mcse",
) -> dict[str, float | str]:
    """Score ``encode`` (list[str] -> 2-D array or tensor) on the STS tasks, Spearman x 100.

    Keys: each task in ``tasks`` ("all" Spearman for STS12-16, test split for STS-B and SICK-R),
    "<task>/<subset>" for the STS12-16 subsets, "avg" (mean of the tasks run; the papers' Avg. when
    all seven are run) and "primary_metric" = "avg". When STS-B is run: "STSBenchmark_dev" and,
    unless ``align_mode`` is None, "alignment" / "uniformity" on STS-B dev ('mcse' or 'dalr').
    """
    if align_mode not in (None, "mcse", "dalr"):
        raise ValueError(f"align_mode {align_mode!r} unknown; use 'mcse', 'dalr' or None")
    sets = _load_sets(data_dir, tasks)
    every = [s for group in sets.values() for ps in group for s in (*ps.sent1, *ps.sent2)]
    emb, row = encode_unique(encode, every, batch_size)
    if emb.ndim == 3:
        raise ValueError("encode returned (members, n, dim); use evaluate_sts_many for an array")
    return _score(emb, row, sets, tasks, align_mode)


class DevEvaluator:
    """STS-B dev Spearman x 100 during training: tokenised once, only dev encoded.

    ``encode_ids(input_ids, attention_mask) -> (batch, dim) Tensor`` is called under ``no_grad``
    on length-sorted, right-padded batches of the distinct dev sentences (no truncation when
    ``max_length`` is None, as in SentEval). Putting the model in eval mode is the caller's job.
    """

    def __init__(
        self,
        data_dir: str | Path,
        tokenizer: Any,
        *,
        batch_size: int = 128,
        max_length: int | None = None,
        device: Any = "cpu",
        split: str = "dev",
    ):
        import torch

        self.pairs = load_stsb(data_dir, split)
        self.device = device
        uniq = list(dict.fromkeys((*self.pairs.sent1, *self.pairs.sent2)))
        ids = tokenizer(uniq, truncation=max_length is not None, max_length=max_length)["input_ids"]
        order = sorted(range(len(uniq)), key=lambda i: len(ids[i]))
        pos = {uniq[i]: k for k, i in enumerate(order)}
        self._idx1 = np.array([pos[s] for s in self.pairs.sent1])
        self._idx2 = np.array([pos[s] for s in self.pairs.sent2])
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        left = getattr(tokenizer, "padding_side", "right") == "left"
        self._batches = []
        for start in range(0, len(order), batch_size):
            rows = [ids[i] for i in order[start : start + batch_size]]
            width = max(len(r) for r in rows)
            input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for r, seq in enumerate(rows):
                sl = slice(width - len(seq), width) if left else slice(0, len(seq))
                input_ids[r, sl] = torch.tensor(seq, dtype=torch.long)
                mask[r, sl] = 1
            self._batches.append((input_ids, mask))

    @property
    def n_pairs(self) -> int:
        return len(self.pairs.gold)

    def embed(self, encode_ids: Callable[[Any, Any], Any]) -> tuple[np.ndarray, np.ndarray]:
        """Embeddings of (sentence1, sentence2) of every dev pair."""
        import torch

        with torch.no_grad():
            out = [
                _as_numpy(encode_ids(ids.to(self.device), mask.to(self.device))).astype(np.float64)
                for ids, mask in self._batches
            ]
        emb = np.concatenate(out)
        return emb[self._idx1], emb[self._idx2]

    def scores_many(self, encode_ids: Callable[[Any, Any], Any]) -> list[float]:
        """STS-B dev Spearman x 100 of each member; ``encode_ids`` returns (M, batch, dim)."""
        import torch

        with torch.no_grad():
            out = [_as_numpy(encode_ids(ids.to(self.device), mask.to(self.device))).astype(np.float64)
                   for ids, mask in self._batches]
        emb = np.concatenate(out, axis=-2)
        if emb.ndim != 3:
            raise ValueError(f"encode_ids must return (members, batch, dim), got {emb.shape[1:]}")
        gold = self.pairs.gold
        return [spearman100(cosine_rows(e[self._idx1], e[self._idx2]), gold) for e in emb]

    def evaluate(
        self, encode_ids: Callable[[Any, Any], Any], align_mode: str | None = None
    ) -> dict[str, float]:
        """{"stsb_dev": Spearman x 100} plus alignment/uniformity when ``align_mode`` is given."""
        a, b = self.embed(encode_ids)
        out = {"stsb_dev": spearman100(cosine_rows(a, b), self.pairs.gold)}
        if align_mode is not None:
            gold = self.pairs.gold
            out["alignment"], out["uniformity"] = alignment_uniformity(a, b, gold, mode=align_mode)
        return out

    def __call__(self, encode_ids: Callable[[Any, Any], Any]) -> float:
        return self.evaluate(encode_ids)["stsb_dev"]
