"""STS evaluation: SentEval file layout, 'all' protocol, blank gold lines, errors, align/uniform."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import rankdata

from trainables.evaluation.sts import (
    ALL_TASKS,
    STS_SUBSETS,
    DevEvaluator,
    SentEvalDataError,
    alignment_uniformity,
    evaluate_sts,
)

WORDS = [
    "a", "man", "dog", "cat", "runs", "sits", "in", "the", "park",
    "on", "street", "red", "blue", "big", "small", "woman", "child", "plays",
]


def _sentence(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(WORDS, size=rng.integers(2, 7)))


def _pairs(rng, n):
    out = []
    while len(out) < n:
        a, b = _sentence(rng), _sentence(rng)
        if a != b:  # identical sentences give cos 1 up to rounding: a tie the reference cannot see
            out.append((a, b, round(float(rng.uniform(0, 5)), 2)))
    return out


def write_layout(root: Path, n_dev: int = 40, seed: int = 0) -> dict:
    """A SentEval 'downstream' folder in miniature; returns the scored pairs per task/subset."""
    rng = np.random.default_rng(seed)
    truth: dict = {}
    for task, subsets in STS_SUBSETS.items():
        folder = root / "STS" / f"{task}-en-test"
        folder.mkdir(parents=True)
        for sub in subsets:
            pairs = _pairs(rng, 6)
            inp, gs, kept = [], [], []
            for k, (a, b, g) in enumerate(pairs):
                # Extra spaces must vanish (SentEval splits and re-joins); pair 2 is unscored.
                inp.append(f"  {a.replace(' ', '  ')}\t{b} ")
                if k == 2:
                    gs.append("")
                else:
                    gs.append(f"{g:.3f}")
                    kept.append((a, b, g))
            (folder / f"STS.input.{sub}.txt").write_text("\n".join(inp) + "\n")
            (folder / f"STS.gs.{sub}.txt").write_text("\n".join(gs) + "\n")
            truth[f"{task}/{sub}"] = kept
    bench = root / "STS" / "STSBenchmark"
    bench.mkdir(parents=True)
    for split, n in (("dev", n_dev), ("test", 12)):
        pairs = _pairs(rng, n)
        lines = [f"genre\tfile\tyear\t{i:04d}\t{g}\t{a}\t{b}" for i, (a, b, g) in enumerate(pairs)]
        (bench / f"sts-{split}.csv").write_text("\n".join(lines) + "\n")
        truth[f"STSBenchmark/{split}"] = pairs
    (root / "SICK").mkdir()
    pairs = _pairs(rng, 10)
    lines = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
    lines += [f"{i}\t{a}\t{b}\t{g}\tNEUTRAL" for i, (a, b, g) in enumerate(pairs)]
    (root / "SICK" / "SICK_test_annotated.txt").write_text("\n".join(lines) + "\n")
    truth["SICKRelatedness/test"] = pairs
    return truth


class AngleEncoder:
    """Each sentence -> (cos t, sin t) with t from a hash, so cos-similarity = cos(t1 - t2) exactly."""

    def __init__(self):
        self.seen: list[str] = []

    @staticmethod
    def angle(s: str) -> float:
        # A continuous hash: distinct sentences never tie (ties would make float rounding matter).
        return int(hashlib.sha256(s.encode()).hexdigest()[:12], 16) / 16**12 * 2 * math.pi

    def __call__(self, sentences):
        self.seen.extend(sentences)
        t = np.array([self.angle(s) for s in sentences])
        return np.stack([np.cos(t), np.sin(t)], 1) * 3.0  # unnormalised on purpose


def ref_spearman(pairs) -> float:
    sys_ = [math.cos(AngleEncoder.angle(a) - AngleEncoder.angle(b)) for a, b, _ in pairs]
    gold = [g for *_, g in pairs]
    return float(np.corrcoef(rankdata(sys_), rankdata(gold))[0, 1]) * 100


@pytest.fixture
def layout(tmp_path):
    return tmp_path, write_layout(tmp_path)


def test_scores_match_independent_spearman(layout):
    root, truth = layout
    enc = AngleEncoder()
    res = evaluate_sts(enc, root)
    for task, subsets in STS_SUBSETS.items():
        every = [p for sub in subsets for p in truth[f"{task}/{sub}"]]
        assert res[task] == pytest.approx(ref_spearman(every), abs=1e-9)  # one Spearman, concatenated
        for sub in subsets:
            assert res[f"{task}/{sub}"] == pytest.approx(ref_spearman(truth[f"{task}/{sub}"]), abs=1e-9)
    assert res["STSBenchmark"] == pytest.approx(ref_spearman(truth["STSBenchmark/test"]), abs=1e-9)
    assert res["STSBenchmark_dev"] == pytest.approx(ref_spearman(truth["STSBenchmark/dev"]), abs=1e-9)
    assert res["SICKRelatedness"] == pytest.approx(ref_spearman(truth["SICKRelatedness/test"]), abs=1e-9)
    assert res["avg"] == pytest.approx(np.mean([res[t] for t in ALL_TASKS]))
    assert res["primary_metric"] == "avg"
    # Inputs are whitespace-normalised, each distinct sentence encoded exactly once.
    assert len(enc.seen) == len(set(enc.seen))
    assert all(s == " ".join(s.split()) for s in enc.seen)


def test_blank_gold_pairs_are_dropped_and_not_encoded(tmp_path):
    write_layout(tmp_path)
    f = tmp_path / "STS" / "STS12-en-test" / "STS.input.MSRpar.txt"
    lines = f.read_text().splitlines()
    lines[2] = "zebra quokka\tplatypus wombat"  # the pair whose gold line is blank
    f.write_text("\n".join(lines) + "\n")
    enc = AngleEncoder()
    evaluate_sts(enc, tmp_path, tasks=("STS12",))
    assert not {"zebra quokka", "platypus wombat"} & set(enc.seen)


def test_subset_of_tasks_and_torch_output(layout):
    import torch

    root, truth = layout
    enc = AngleEncoder()
    res = evaluate_sts(lambda s: torch.from_numpy(enc(s)).float(), root, tasks=("SICKRelatedness",), batch_size=3)
    assert res["SICKRelatedness"] == pytest.approx(ref_spearman(truth["SICKRelatedness/test"]), abs=1e-4)
    assert res["avg"] == res["SICKRelatedness"] and "STS12" not in res and "alignment" not in res


def test_accepts_parent_data_folder(tmp_path):
    write_layout(tmp_path / "downstream")
    assert "STS13" in evaluate_sts(AngleEncoder(), tmp_path, tasks=("STS13",))


def test_missing_file_names_it_and_the_fix(layout):
    root, _ = layout
    (root / "STS" / "STS14-en-test" / "STS.input.images.txt").unlink()
    with pytest.raises(SentEvalDataError, match=r"STS14 not found.*STS14-en-test/STS\.input\.images\.txt.*downstream"):
        evaluate_sts(AngleEncoder(), root)
    with pytest.raises(SentEvalDataError, match="does not exist"):
        evaluate_sts(AngleEncoder(), root / "nope")


def test_missing_sick_names_file(layout):
    root, _ = layout
    (root / "SICK" / "SICK_test_annotated.txt").unlink()
    with pytest.raises(SentEvalDataError, match="SICK_test_annotated.txt"):
        evaluate_sts(AngleEncoder(), root, tasks=("SICKRelatedness",))


@pytest.mark.parametrize(
    "fname, text, pattern",
    [
        ("STS/STS12-en-test/STS.input.MSRvid.txt", "a\tb\tc\n" + "x\ty\n" * 5, r"MSRvid\.txt:1: 3 tab-separated fields"),
        ("STS/STS12-en-test/STS.gs.MSRvid.txt", "1.0\n", "6 sentence pairs but STS.gs.MSRvid.txt has 1"),
        ("STS/STS12-en-test/STS.gs.MSRvid.txt", "x\n" * 6, r"MSRvid\.txt:1: gold score 'x'"),
        ("STS/STSBenchmark/sts-test.csv", "g\tf\ty\t1\t2.0\tonly one\n", r"sts-test\.csv:1: 6 tab-separated"),
        ("STS/STSBenchmark/sts-test.csv", "g\tf\ty\t1\tnan\ta\tb\n", "gold score 'nan'"),
    ],
)
def test_malformed_files(layout, fname, text, pattern):
    root, _ = layout
    (root / fname).write_text(text)
    with pytest.raises(SentEvalDataError, match=pattern):
        evaluate_sts(AngleEncoder(), root)


def test_bad_arguments_and_encoder(layout):
    root, _ = layout
    with pytest.raises(ValueError, match="unknown STS task"):
        evaluate_sts(AngleEncoder(), root, tasks=("STS17",))
    with pytest.raises(ValueError, match="align_mode"):
        evaluate_sts(AngleEncoder(), root, align_mode="wang")
    with pytest.raises(ValueError, match="2-D"):
        evaluate_sts(lambda s: np.zeros(len(s)), root, tasks=("STS13",))


def _direct_align_uniform(e1, e2, gold, mode, bs):
    """Straight loops over Wang and Isola's definitions, as the two modified sts.py files apply them."""
    def unit(v):
        return v / np.linalg.norm(v)

    def unif(rows):
        vals = [math.exp(-2 * np.sum((unit(rows[i]) - unit(rows[j])) ** 2))
                for i in range(len(rows)) for j in range(i + 1, len(rows))]
        return math.log(sum(vals) / len(vals))

    def align(x, y):
        return float(np.mean([np.sum((unit(a) - unit(b)) ** 2) for a, b in zip(x, y, strict=True)]))

    if mode == "dalr":
        pos = gold > 4
        return align(e1[pos], e2[pos]), unif(list(e1) + list(e2))
    al, un = [], []
    for s in range(0, len(gold), bs):
        pos = gold[s:s + bs] >= 4.0
        al.append(align(e1[s:s + bs][pos], e2[s:s + bs][pos]) if pos.any() else 0.0)
        un.append(unif(list(e1[s:s + bs]) + list(e2[s:s + bs])))
    return float(np.mean(al)), float(np.mean(un))


@pytest.mark.parametrize("mode", ["mcse", "dalr"])
def test_alignment_uniformity_direct(mode):
    rng = np.random.default_rng(1)
    e1, e2 = rng.normal(size=(23, 5)), rng.normal(size=(23, 5))
    gold = rng.choice([0.5, 3.9, 4.0, 4.5, 5.0], size=23)
    gold[:7] = 1.0  # first batch (bs 7) has no positive: MCSE counts it as 0
    got = alignment_uniformity(e1, e2, gold, mode=mode, batch_size=7)
    assert got == pytest.approx(_direct_align_uniform(e1, e2, gold, mode, 7), rel=1e-9)


def test_alignment_uniformity_in_evaluate_sts_uses_stsb_dev(tmp_path):
    truth = write_layout(tmp_path, n_dev=300)  # > 128: several MCSE batches
    gold = np.array([g for *_, g in truth["STSBenchmark/dev"]])
    enc = AngleEncoder()
    e1 = enc([a for a, _, _ in truth["STSBenchmark/dev"]])
    e2 = enc([b for _, b, _ in truth["STSBenchmark/dev"]])
    for mode in ("mcse", "dalr"):
        res = evaluate_sts(AngleEncoder(), tmp_path, tasks=("STSBenchmark",), align_mode=mode)
        want = _direct_align_uniform(e1, e2, gold, mode, 128)
        assert (res["alignment"], res["uniformity"]) == pytest.approx(want, rel=1e-9)


def test_dev_evaluator_agrees_with_evaluate_sts(tmp_path, tiny_bert):
    import torch
    from transformers import AutoModel, AutoTokenizer

    write_layout(tmp_path, n_dev=50)
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    model = AutoModel.from_pretrained(tiny_bert).eval()

    def encode(sentences):
        batch = tok(sentences, padding=True, return_tensors="pt")
        with torch.no_grad():
            return model(**batch).last_hidden_state[:, 0]

    calls = []

    def encode_ids(input_ids, attention_mask):
        calls.append(input_ids.shape)
        return model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]

    dev = DevEvaluator(tmp_path, tok, batch_size=16)
    want = evaluate_sts(encode, tmp_path, tasks=("STSBenchmark",))
    assert dev(encode_ids) == pytest.approx(want["STSBenchmark_dev"], abs=1e-6)
    got = dev.evaluate(encode_ids, align_mode="mcse")
    assert (got["alignment"], got["uniformity"]) == pytest.approx((want["alignment"], want["uniformity"]), abs=1e-5)
    assert dev.n_pairs == 50 and calls[0][0] == 16
    widths = [s[1] for s in calls[: len(dev._batches)]]
    assert widths == sorted(widths)  # length-sorted batches: little padding


@pytest.mark.slow
def test_minilm_mean_pooling_stsb_test(minilm, senteval_dir):
    """all-MiniLM-L6-v2 with attention-masked mean pooling scores 82.03 on STS-B test."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(minilm)
    model = AutoModel.from_pretrained(minilm).eval()

    def encode(sentences):
        batch = tok(sentences, padding=True, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return (hidden * mask).sum(1) / mask.sum(1)

    res = evaluate_sts(encode, senteval_dir, tasks=("STSBenchmark",))
    assert res["STSBenchmark"] == pytest.approx(82.03, abs=0.05)
