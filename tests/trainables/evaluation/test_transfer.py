"""SentEval's transfer tasks: reading the real formats, the three protocols, the batched probe, bad data."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from trainables.evaluation.probe import PROBES, FitGroup, fit_many, init_linear
from trainables.evaluation.sts import SentEvalDataError
from trainables.evaluation.transfer import (
    TASK_FILES,
    TRANSFER_TASKS,
    _stratified_folds,
    check_transfer,
    evaluate_transfer,
    evaluate_transfer_many,
    load_task,
    probe_task,
    transfer_files,
)
from trainables.testing import word_vector_encoder, write_transfer_data


def scaled(scale: float = 1.0):
    encode = word_vector_encoder()
    return lambda sentences: encode(sentences) * scale


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_transfer_data(tmp_path_factory.mktemp("senteval") / "downstream", n=120)


def accuracies(res: dict) -> dict[str, float]:
    return {t: res[t] for t in TRANSFER_TASKS if t in res}


# --- reading ------------------------------------------------------------------------------
def test_reads_every_format_as_senteval_does(tiny):
    mr = load_task(tiny, "MR")
    assert mr.protocol == "innerkfold" and len(mr.train) == 240
    assert any("caf\u00e9" in s for s in mr.train.sent1)  # latin-1 byte 0xe9 read as latin-1
    n_tokens = [len(s.split()) for s in mr.train.sent1]
    keys = list(zip(n_tokens, mr.train.labels.tolist(), strict=True))
    assert keys == sorted(keys)  # SentEval's order: token count, then label
    for name in ("CR", "MPQA"):  # the empty line is a sample
        task = load_task(tiny, name)
        assert len(task.train) == 240 and task.train.sent1.count("") == 1
        assert task.train.labels[task.train.sent1.index("")] == 1
    sst = load_task(tiny, "SST2")
    assert (len(sst.train), len(sst.valid), len(sst.test)) == (240, 60, 60)
    assert any("na\u00efve" in s for s in sst.train.sent1)  # UTF-8
    trec = load_task(tiny, "TREC")
    assert trec.nclasses == 6 and sorted(set(trec.train.labels.tolist())) == list(range(6))
    assert not any(s.startswith("fine") for s in trec.train.sent1)  # the fine label is dropped
    mrpc = load_task(tiny, "MRPC")
    assert len(mrpc.train) == 240 and len(mrpc.test) == 60  # the header line is not a pair
    assert not any("\ufeff" in s or "String" in s for s in mrpc.train.sent1)
    assert all(a == b for a, b, y in zip(mrpc.train.sent1, mrpc.train.sent2, mrpc.train.labels,
                                         strict=True) if y == 1)
    assert [p.relative_to(tiny).as_posix() for p in mrpc.files] == list(TASK_FILES["MRPC"])


def test_whitespace_is_normalised_and_crlf_read(tmp_path):
    root = write_transfer_data(tmp_path / "d", n=30)
    path = root / "MR" / "rt-polarity.pos"
    lines = path.read_bytes().split(b"\n")[:-1]
    lines[0] = b"  good \t film   was  "
    path.write_bytes(b"\r\n".join(lines) + b"\r\n")
    task = load_task(root, "MR")
    assert "good film was" in task.train.sent1 and len(task.train) == 60


def test_stratified_folds_partition_and_balance():
    labels = np.array([0] * 37 + [1] * 63)
    folds = _stratified_folds(labels, 10, 1111)
    assert len(folds) == 10
    tests = np.concatenate([te for _, te in folds])
    assert sorted(tests.tolist()) == list(range(100))
    for tr, te in folds:
        assert set(tr).isdisjoint(te) and len(tr) + len(te) == 100
        assert abs(labels[te].mean() - 0.63) < 0.1
    again = _stratified_folds(labels, 10, 1111)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again, strict=True))


# --- the probe ------------------------------------------------------------------------------
def reference_fit(x, y, nclasses, l2reg, probe, valid=None, seed=1111):
    """SentEval's MLP(nhid=0).fit restated with plain torch modules, on the CPU."""
    np.random.seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Linear(x.shape[1], nclasses)
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = (torch.optim.Adam if probe.optim == "adam" else torch.optim.RMSprop)(model.parameters())
    opt.param_groups[0]["weight_decay"] = l2reg
    if valid is None:
        perm = np.random.permutation(len(x))
        k = int(0.05 * len(x))
        tx, ty, vx, vy = x[perm[k:]], y[perm[k:]], x[perm[:k]], y[perm[:k]]
    else:
        tx, ty, (vx, vy) = x, y, valid
    tx, vx = torch.from_numpy(tx).float(), torch.from_numpy(vx).float()
    ty, vy = torch.from_numpy(ty).long(), torch.from_numpy(vy).long()
    nepoch, best, count, stop = 0, -1.0, 0, False
    while not stop and nepoch <= probe.max_epoch:
        for _ in range(probe.epoch_size):
            perm = np.random.permutation(len(tx))
            for i in range(0, len(tx), probe.batch_size):
                idx = torch.from_numpy(perm[i : i + probe.batch_size])
                loss = loss_fn(model(tx[idx]), ty[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        nepoch += probe.epoch_size
        with torch.no_grad():
            acc = (model(vx).argmax(1) == vy).double().mean().item()
        if acc > best:
            best, kept = acc, copy.deepcopy(model)
        else:
            if count >= probe.tenacity:
                stop = True
            count += 1
    return kept, best, nepoch


def noisy_problem(n=400, d=12, nclasses=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x[:, :nclasses] + 0.8 * rng.normal(size=(n, nclasses))).argmax(1).astype(np.int64)
    return x, y


def test_init_is_nn_linear_after_manual_seed():
    state = torch.random.get_rng_state()
    w, b = init_linear(37, 3, seed=1111)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global stream is untouched
    torch.manual_seed(1111)
    lin = torch.nn.Linear(37, 3)
    assert torch.equal(lin.weight.data, w) and torch.equal(lin.bias.data, b)


@pytest.mark.parametrize("mode", ["full", "fast"])
@pytest.mark.parametrize("split", [True, False])
def test_probe_is_sentevals_fit(mode, split):
    probe = PROBES[mode]
    x, y = noisy_problem(nclasses=3)
    tr, va = np.arange(300), np.arange(300, 400)
    for reg in (1e-5, 1e-2):
        valid = None if split else (x[va], y[va])
        kept, best, nepoch = reference_fit(x[tr], y[tr], 3, reg, probe, valid)
        [[fit]] = fit_many(torch.from_numpy(x), torch.from_numpy(y), 3,
                           [FitGroup(tr, None if split else va, (reg,))], probe)
        assert fit.valid_acc == best and fit.epochs == nepoch
        torch.testing.assert_close(fit.weight, kept.weight.data, atol=1e-5, rtol=0)
        torch.testing.assert_close(fit.bias, kept.bias.data, atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", ["full", "fast"])
def test_batched_fits_equal_fits_alone(mode):
    """Groups of different sizes (different steps per epoch, different stopping points) trained
    together give every fit what it gives alone."""
    probe = PROBES[mode]
    x, y = noisy_problem(n=700, nclasses=2, seed=1)
    rng = np.random.default_rng(2)
    groups = []
    for n_train in (200, 263, 330, 401):
        rows = rng.permutation(700)
        groups.append(FitGroup(rows[:n_train], rows[n_train : n_train + 90] if n_train % 2 else None,
                               (1e-5, 1e-4, 1e-3, 1e-2)))
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    together = fit_many(xt, yt, 2, groups, probe)
    epochs = set()
    for g, fits in zip(groups, together, strict=True):
        for reg, fit in zip(g.l2regs, fits, strict=True):
            [[alone]] = fit_many(xt, yt, 2, [FitGroup(g.train, g.valid, (reg,))], probe)
            assert fit.valid_acc == alone.valid_acc and fit.epochs == alone.epochs
            torch.testing.assert_close(fit.weight, alone.weight, atol=1e-6, rtol=0)
            epochs.add(fit.epochs)
    assert len(epochs) > 1  # the members did stop at different points


# --- the tasks end to end -------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["fast", "full"])
def test_every_task_separable_features_reach_full_accuracy(tiny, mode):
    calls: list[list[str]] = []

    def encode(sentences):
        calls.append(sentences)
        return scaled()(sentences)

    res = evaluate_transfer(encode, tiny, mode=mode)
    assert res["mode"] == mode and res["primary_metric"] == "avg"
    assert any("" in c for c in calls)  # the empty samples were embedded
    acc = accuracies(res)
    assert set(acc) == set(TRANSFER_TASKS)
    assert all(v >= 90.0 for v in acc.values()), acc
    assert res["avg"] == pytest.approx(np.mean(list(acc.values())))
    assert all(res[f"{t}/devacc"] >= 90.0 for t in TRANSFER_TASKS)
    assert 0.0 <= res["MRPC/f1"] <= 100.0 and res["MRPC/seconds"] >= 0.0


def test_shuffled_labels_give_chance(tmp_path):
    root = write_transfer_data(tmp_path / "d", n=150, separable=False)
    res = evaluate_transfer(scaled(), root, tasks=["MR", "CR", "SUBJ", "MPQA", "SST2"], mode="fast")
    acc = accuracies(res)
    assert all(30.0 <= v <= 70.0 for v in acc.values()), acc
    assert 40.0 <= res["avg"] <= 60.0


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_fold_counts_and_penalties(tiny, mode):
    k = PROBES[mode].kfold
    embed = scaled()
    for name, n_fits, n_regs in (("CR", k * k * 4 + k, k), ("TREC", k * 4 + 1, 1), ("SST2", 4, 1)):
        task = load_task(tiny, name)
        res = probe_task(task, embed, mode)
        assert res.n_fits == n_fits and len(res.l2regs) == n_regs
        assert set(res.l2regs) <= {1e-5, 1e-4, 1e-3, 1e-2}
        if name == "CR":
            assert len(res.extra["fold_acc"]) == k
            assert res.acc == pytest.approx(np.mean(res.extra["fold_acc"]), abs=0.006)


def test_deterministic_and_members_independent(tiny):
    tasks = ["CR", "TREC", "MRPC"]
    a = evaluate_transfer(scaled(), tiny, tasks=tasks, mode="fast")
    b = evaluate_transfer(scaled(), tiny, tasks=tasks, mode="fast")
    drop = lambda r: {k: v for k, v in r.items() if not k.endswith("/seconds")}  # noqa: E731
    assert drop(a) == drop(b)
    other = scaled(scale=3.0)  # a second member with other embeddings
    many = evaluate_transfer_many(lambda s: np.stack([scaled()(s), other(s)]), tiny, tasks=tasks,
                                  mode="fast")
    assert drop(many[0]) == drop(a)
    assert drop(many[1]) == drop(evaluate_transfer(other, tiny, tasks=tasks, mode="fast"))


# --- bad data ---------------------------------------------------------------------------------
def test_check_transfer_reads_every_file(tiny):
    line = check_transfer(tiny)
    assert "7 tasks, 15 files" in line and str(tiny) in line
    assert check_transfer(tiny.parent, tasks=["MR"], mode="fast").startswith("SentEval transfer")
    files = transfer_files(tiny)
    assert len(files) == 15 and all(f.is_file() for f in files)


def _replace_line(path: Path, lineno: int, new: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[lineno - 1] = new
    path.write_bytes(b"\n".join(lines))


BAD = {
    "missing folder": (lambda r: __import__("shutil").rmtree(r / "TREC"),
                       ["TREC: folder TREC not found", "downstream"]),
    "missing file": (lambda r: (r / "SST/binary/sentiment-dev").unlink(),
                     ["SST2: file SST/binary/sentiment-dev not found"]),
    "trec malformed": (lambda r: _replace_line(r / "TREC/train_5500.label", 3, b"what is this"),
                       ["train_5500.label:3:", "COARSE:fine question"]),
    "trec unknown class": (lambda r: _replace_line(r / "TREC/TREC_10.label", 2, b"FOO:bar what"),
                           ["TREC_10.label:2:"]),
    "sst columns": (lambda r: _replace_line(r / "SST/binary/sentiment-train", 5, b"a\tb\t1"),
                    ["sentiment-train:5: 3 tab-separated fields, expected 2"]),
    "sst label": (lambda r: _replace_line(r / "SST/binary/sentiment-test", 1, b"a film\t2"),
                  ["sentiment-test:1: label '2'"]),
    "sst not utf8": (lambda r: _replace_line(r / "SST/binary/sentiment-dev", 4, b"caf\xe9\t1"),
                     ["sentiment-dev:4: not valid UTF-8"]),
    "mrpc header": (lambda r: (r / "MRPC/msr_paraphrase_test.txt").write_bytes(
        b"\n".join((r / "MRPC/msr_paraphrase_test.txt").read_bytes().split(b"\n")[1:])),
        ["msr_paraphrase_test.txt:1: expected the header line"]),
    "mrpc columns": (lambda r: _replace_line(r / "MRPC/msr_paraphrase_train.txt", 7, b"1\t2\t3\ta b"),
                     ["msr_paraphrase_train.txt:7: 4 tab-separated fields, expected 5"]),
    "empty file": (lambda r: (r / "MPQA/mpqa.neg").write_bytes(b""), ["mpqa.neg: empty file"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_data_one_line(tmp_path, case):
    root = write_transfer_data(tmp_path / "downstream", n=30)
    mutate, fragments = BAD[case]
    mutate(root)
    with pytest.raises(SentEvalDataError) as err:
        check_transfer(root)
    msg = str(err.value)
    assert "\n" not in msg and all(f in msg for f in fragments), msg
    calls = []
    with pytest.raises(SentEvalDataError):  # refused before anything is encoded
        evaluate_transfer(lambda s: calls.append(s) or np.zeros((len(s), 4)), root, mode="fast")
    assert calls == []


def test_too_small_for_the_folds(tmp_path):
    root = write_transfer_data(tmp_path / "d", n=14)
    check_transfer(root, tasks=["MR", "TREC"], mode="fast")  # 14 per class: enough for 5 folds
    with pytest.raises(SentEvalDataError, match=r"MR has \[14, 14\] samples per class, full mode"):
        check_transfer(root, tasks=["MR"], mode="full")


def test_missing_data_folder_and_bad_arguments(tmp_path):
    with pytest.raises(SentEvalDataError, match="does not exist"):
        check_transfer(tmp_path / "nowhere")
    root = write_transfer_data(tmp_path / "d", n=12)
    with pytest.raises(ValueError, match="unknown transfer task"):
        check_transfer(root, tasks=["SST5"])
    with pytest.raises(ValueError, match="transfer mode 'test' unknown"):
        check_transfer(root, mode="test")


# --- the real data ----------------------------------------------------------------------------
# MiniLM-L6 (mean pooling) on the real SentEval data: the figures bench/README.md records for
# `python bench/eval_transfer.py` (fast and full mode), accuracy x 100. SentEval's folds and seeds
# are fixed and the test encodes in the bench's batches, so the only slack is floating-point
# rounding (the encoder's thread count, the batched probes): a few test samples of a task, or a
# different penalty chosen on one fold. TOLERANCE is in accuracy points, per task and on the avg.
# Cost on 2 CPU cores: encoding the 119,152 distinct sentences once, ~26 CPU-minutes (the first
# mode run pays it; 75 min wall on a loaded machine), then the probes, ~0.5 min fast, ~5-8 min full.
MINILM = {
    "fast": {"MR": 75.06, "CR": 82.07, "SUBJ": 91.89, "MPQA": 86.96, "SST2": 81.55, "TREC": 88.40,
             "MRPC": 71.71},  # avg 82.52
    "full": {"MR": 76.34, "CR": 82.15, "SUBJ": 91.98, "MPQA": 87.50, "SST2": 81.27, "TREC": 90.00,
             "MRPC": 72.35},  # avg 83.08
}
MINILM_F1 = {"fast": 80.43, "full": 81.40}
"""MRPC's F1 x 100 in the same runs"""
TOLERANCE = 0.3
REAL = Path(__file__).resolve().parents[4] / "shared" / "data" / "senteval" / "downstream"


@pytest.fixture(scope="module")
def minilm_encode(minilm):
    """MiniLM-L6 with attention-masked mean pooling, as bench/eval_transfer.py encodes; a batch
    seen before is returned from memory, so the second mode does not encode again."""
    missing = [p for p in transfer_files(REAL) if not p.is_file()]
    if missing:
        pytest.skip(f"SentEval transfer data not found: {missing[0]} (run from a checkout beside shared/data)")
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(minilm)
    model = AutoModel.from_pretrained(minilm).eval()
    seen: dict[tuple[str, ...], np.ndarray] = {}

    def encode(sentences):
        key = tuple(sentences)
        if key not in seen:
            batch = tok(sentences, padding=True, return_tensors="pt")
            with torch.no_grad():
                hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            seen[key] = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
        return seen[key]

    return encode


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "full"])
def test_minilm_on_the_real_transfer_tasks(minilm_encode, mode):
    res = evaluate_transfer(minilm_encode, REAL, mode=mode, batch_size=128)
    want = MINILM[mode]
    assert res["mode"] == mode and set(want) == set(TRANSFER_TASKS)
    got = {t: res[t] for t in TRANSFER_TASKS}
    assert got == pytest.approx(want, abs=TOLERANCE), got
    assert res["avg"] == pytest.approx(np.mean(list(want.values())), abs=TOLERANCE)
    assert res["MRPC/f1"] == pytest.approx(MINILM_F1[mode], abs=3 * TOLERANCE)
