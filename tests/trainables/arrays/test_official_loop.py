"""The array's loop against an independent reference of the official one (tests/official_loop.py),
in float64, where the two must agree to 1e-10 unless a rule differs, and in float32, the
precision the official runs trained in (docs/official-code.md "The loop" has the figures).

- one member, and each member of an array of 3 with different learning rates, end where the
  reference ends (one caption step in three, clipping biting, dropout off) for MCSE, KDMCSE and
  DALR (two tiny text teachers named as the official paths, so their pooler is
  ``cls_before_pooler``, weights 0.33 / 0.67);
- DALR term by term and step by step over 64 steps (24 caption steps), and each DALR Table 3
  cell, packed into one array as the grid runs them (slow);
- KDMCSE with its threshold filter on features where it masks some negatives of every caption
  batch and never all;
- the comparison sees a changed rule: each of a set of one-rule changes to the reference (the
  ListMLE floor, the global-local masks, the BatchNorm updates and momentum, the teachers' and
  aligners' modes, clipping, the KL temperatures) parts far above 1e-10 (slow), and so does
  torch's AdamW; ListMLE's tie-break draws from the member's stream.

The default suite runs all but the two slow groups: ``python -m pytest -m slow
tests/trainables/arrays/test_official_loop.py`` runs those (one to two minutes on two loaded
cores).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from search_spaces._dalr_ablation import NAMES as TABLE3_CELLS
from search_spaces._dalr_ablation import ablation
from tests import official_loop as ref
from trainables.arrays.members import generator
from trainables.arrays.optim import ArrayAdamW, MemberHyper
from trainables.arrays.trainer import ArrayTrainer
from trainables.config.run_config import RunConfig
from trainables.data.store import StoreMetadata, write_store
from trainables.testing import WORDS, write_bert_tokenizer

H = 32
BS, EPOCHS = 8, 2
N_TEXT, N_PAIR = 96, 32  # 12 text and 4 pair batches: paired_sample_step 3, 16 steps an epoch
PAIR_STEPS = 6  # steps 0, 3, ..., 15 of every epoch
TOL = 1e-5
"""float32 agreement (seen: terms within 9e-7, weights within 4.8e-7; INIT says why)"""
TOL64 = 1e-10
"""float64 agreement asked of every term at every step (|a - b| / max(1, |b|)) and of every weight
and BatchNorm statistic at the end (seen: 4e-15 at most). In float32 the same runs part by up to
2e-6, rounding amplified by DALR's sharp terms; a rule that differs parts far above 1e-10 in
float64 (``test_the_comparison_sees_a_changed_rule``)."""
INIT = 0.2
"""initializer_range of the tiny BERTs (and so of the MLP). At BERT's 0.02 every sentence gets
nearly the same [CLS]: the text loss sits at log(bs), DALR's L_IMA at 0 and ListMLE at log(bs!),
their gradients vanish, and Adam's lr * g / eps turns float32 noise in the near-zero gradients into
1e-5 of weight (an fp32 reference then ends 2.7e-5 from the same run in fp64 at lr 3e-4). At 0.2
the losses train (text loss down to 0.01-0.3), clipping bites on every step (norms 0.1-90), every
DALR term moves the weights, and the fp32 reference stays within 1.1e-6 of fp64 at lr 1e-3."""
TEACHER_DROPOUT = 0.1
"""the teachers' dropout: the official teachers run in eval mode (``from_pretrained`` leaves them
there and ``model.train()`` never reaches them), so it must change nothing; one left in train
mode would draw masks and part at once"""
SCORE_BASE = 4.0
"""KDMCSE's threshold on the raw dot products of the grouped store's features: a caption's dot
product with another of its group is about 8, with any other about 0 (``grouped``)"""


@dataclass(frozen=True)
class World:
    """A tiny case both sides train on: the student and two teachers (folders), the corpus, the
    captions and their stored features, and the dims the reference needs."""

    root: Path
    bert: Path
    texts: list[str]
    captions: list[str]
    image: np.ndarray
    clip_text: np.ndarray
    hidden: int
    batch_size: int


def make_world(root: Path, *, hidden: int = H, init: float = INIT, n_text: int = N_TEXT,
               n_pair: int = N_PAIR, batch_size: int = BS, seed: int = 0) -> World:
    """The student (dropout 0) and DALR's two teachers (same vocabulary, their own weights,
    TEACHER_DROPOUT), named "simcse" and "DiffCSE" as the official paths are, for the
    cls_before_pooler pooling; random sentences, distinct captions and image and CLIP-text
    features; a STS-B dev file."""
    from transformers import BertConfig, BertModel

    for i, name in enumerate(("bert", "simcse", "DiffCSE")):
        path = write_bert_tokenizer(root / name)
        torch.manual_seed(i)
        drop = 0.0 if name == "bert" else TEACHER_DROPOUT
        BertModel(BertConfig(vocab_size=len((path / "vocab.txt").read_text().split()),
                             hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=2 * hidden, max_position_embeddings=64,
                             hidden_dropout_prob=drop, attention_probs_dropout_prob=drop,
                             initializer_range=init)).save_pretrained(path)
    rng = np.random.default_rng(seed)

    def sentence():
        return " ".join(rng.choice(WORDS, size=rng.integers(3, 9)))

    texts = [sentence() for _ in range(n_text)]
    (root / "wiki.txt").write_text("\n".join(texts) + "\n")
    captions = [sentence() for _ in range(n_pair)]
    # distinct captions: DALR's teacher scores then have no ties, and ListMLE's random tie-break
    # permutation cannot change its value (tests/official_loop.py; the stream itself:
    # test_listmle_tie_break_draws_from_the_members_stream)
    assert len(set(captions)) == n_pair
    image = rng.standard_normal((n_pair, hidden)).astype(np.float32) * 3
    clip_text = rng.standard_normal((n_pair, hidden)).astype(np.float32) * 3
    write_store(root / "pairs.parquet", captions, [str(i) for i in range(n_pair)],
                {"image": image, "clip_text": clip_text},
                StoreMetadata("test-image", hidden, "test-clip", hidden, normalized=False))
    sts = root / "senteval" / "STS" / "STSBenchmark"
    sts.mkdir(parents=True)
    rows = [f"g\tx\t0\t0\t{rng.uniform(0, 5):.2f}\t{sentence()}\t{sentence()}" for _ in range(16)]
    for split in ("dev", "test"):
        (sts / f"sts-{split}.csv").write_text("\n".join(rows) + "\n")
    return World(root, root / "bert", texts, captions, image, clip_text, hidden, batch_size)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return make_world(tmp_path_factory.mktemp("official-loop"))


@pytest.fixture(scope="module")
def grouped(world):
    return grouped_store(world)


def grouped_store(world: World) -> tuple[Path, tuple]:
    """A store whose features come in four groups (row i in group i % 4), unnormalised as stored
    CLIP features are: KDMCSE's threshold filter masks a caption's same-group negatives (about a
    quarter of a batch's), never all of them, and no dot product lies within 1.0 of the
    threshold, so float32 and float64 take the same decisions."""
    rng = np.random.default_rng(1)
    centres = np.linalg.qr(rng.standard_normal((H, 4)))[0].T * 8**0.5  # orthogonal, |c|^2 = 8
    group = np.arange(N_PAIR) % 4
    image = (centres[group] + rng.standard_normal((N_PAIR, H)) * 0.15).astype(np.float32)
    clip_text = (centres[group] + rng.standard_normal((N_PAIR, H)) * 0.15).astype(np.float32)
    dots = clip_text.astype(np.float64) @ image.T.astype(np.float64)
    same = group[:, None] == group[None, :]
    off = ~np.eye(N_PAIR, dtype=bool)
    assert dots[same & off].min() > SCORE_BASE + 1 and dots[~same].max() < SCORE_BASE - 1
    path = write_store(world.root / "grouped.parquet", world.captions, [str(i) for i in range(N_PAIR)],
                       {"image": image, "clip_text": clip_text},
                       StoreMetadata("test-image", H, "test-clip", H, normalized=False))
    return path, (world.captions, image, clip_text)


def member(world: World, method, seed, lr):
    root, bert = world.root, world.bert
    # DALR's weights stay the official hard-coded ones (lam 0.1, mu 0.2, teachers 0.33 / 0.67)
    objective = ({"text_teachers": [str(root / "simcse"), str(root / "DiffCSE")]} if method == "dalr"
                 else {"objective.lam": 1.0})
    return RunConfig().with_overrides({
        "objective.method": method, **objective, "encoder": str(bert),
        "data.text": str(root / "wiki.txt"), "data.pairs": str(root / "pairs.parquet"),
        "data.senteval": str(root / "senteval"), "data.cache_dir": str(root / "cache"),
        "batch_size": world.batch_size, "epochs": EPOCHS, "lr": lr, "seed": seed, "eval_every": 1000,
        "final_eval": False, "precision": "fp32", "eval_batch_size": 16})


def dalr_config(world, seed=0, **overrides) -> RunConfig:
    """lr 5e-4 (the issue's case) and 4 epochs: 64 steps, 24 of them caption steps."""
    return member(world, "dalr", seed, 5e-4).with_overrides({"epochs": 4, **overrides})


def as_float64(trainer: ArrayTrainer) -> ArrayTrainer:
    """The array in float64, set from the test (the config knows no fp64 precision): the stacked
    model and the heads cast, the optimiser made again over the cast parameters as the trainer
    makes it, the teachers cast (their stack too) and each caption batch's stored features
    (float32 numbers) handed to the losses as float64 tensors, as the reference reads them."""
    trainer.model.double()
    trainer.optimizer = ArrayAdamW(
        trainer.model.stacked_parameters(), trainer.model.own_parameters(),
        [MemberHyper(m.cfg.lr, m.cfg.weight_decay, m.cfg.adam_eps, m.cfg.grad_clip, m.cfg.optimizer)
         for m in trainer.members],
        trainer.total_steps, apart=trainer.model.gathered_parameters())
    cast: set[int] = set()
    for m in trainer.members:
        if m.teacher_stack is not None:
            m.teacher_stack.encoder.double()
        for t in (m.teachers.teachers if m.teachers is not None else ()):
            t.model.double()
        if id(m.data) in cast:
            continue
        cast.add(id(m.data))

        def batch(*args, _batch=m.data.batch, **kwargs):
            b = _batch(*args, **kwargs)
            return dataclasses.replace(b, image=None if b.image is None else b.image.double(),
                                       clip_text=None if b.clip_text is None else b.clip_text.double())

        m.data.batch = batch
    return trainer


def array(members: list[tuple[str, RunConfig]], dtype: torch.dtype) -> ArrayTrainer:
    torch.set_num_threads(1)
    trainer = ArrayTrainer(members)
    return as_float64(trainer) if dtype == torch.float64 else trainer


def reference_run(world, trainer: ArrayTrainer, j: int, method: str, cfg: RunConfig,
                  dtype: torch.dtype = torch.float32,
                  tweak: Callable[[ref.RefStudent, list], None] | None = None,
                  state: dict | None = None, **kwargs) -> tuple:
    """The reference from member j's initial weights (the MLP's and heads' init is the array's;
    call it before the array trains, or pass ``state``, the member's state taken then) and its
    ListMLE tie-break stream, in ``dtype``; ``tweak(student, teachers)`` before training;
    ``kwargs`` go to ``official_loop.train`` (``pairs``: another store's rows)."""
    from transformers import AutoTokenizer, BertModel

    bert_dir, texts, captions, image, clip_text = (world.bert, world.texts, world.captions,
                                                   world.image, world.clip_text)
    h = world.hidden
    if "pairs" in kwargs:
        captions, image, clip_text = kwargs.pop("pairs")
    tok = AutoTokenizer.from_pretrained(bert_dir)

    def tokenize(sents):
        enc = tok(sents, max_length=32, truncation=True, padding="longest", return_tensors="pt")
        return enc["input_ids"], enc["attention_mask"]

    state = state or trainer.model.member_state(j)
    assert trainer.step == 0 or state is not None, "the member has trained: pass its initial state"
    student = ref.RefStudent(BertModel.from_pretrained(bert_dir, add_pooling_layer=False), h,
                             cfg.proj_dim, h, h if method == "kdmcse" else None,
                             aligners=method == "dalr")
    teachers = [(ref.RefTeacher(BertModel.from_pretrained(bert_dir.parent / name)), w)
                for name, w in (("simcse", 0.33), ("DiffCSE", 0.67))] if method == "dalr" else []
    student.mlp.load_state_dict(state["mlp"])
    for name in ("grounding", "image_head", "clip_text_head", "text_aligner", "image_aligner"):
        sub = {k.split(".", 1)[1]: v for k, v in state["heads"].items() if k.split(".")[0] == name}
        if sub:
            getattr(student, name).load_state_dict(sub)
    student.to(dtype)
    for t, _ in teachers:
        t.bert.to(dtype)
    if tweak is not None:
        tweak(student, teachers)
    trace = ref.train(student, method, texts, captions, image, clip_text, tokenize, lr=cfg.lr,
                      bs=world.batch_size, epochs=cfg.epochs, seed=cfg.seed, lam=1.0, teachers=teachers,
                      listmle=generator(cfg.seed, "listmle", "cpu"), **kwargs)
    return student, trace


def member_weights(trainer, j):
    state = trainer.model.member_state(j)
    return {**{f"bert.{k}": v for k, v in state["encoder"].items()},
            **{f"mlp.{k}": v for k, v in state["mlp"].items()},
            **state["heads"]}


def is_bn_stat(key):
    return key.endswith(("running_mean", "running_var"))


@dataclass
class Gaps:
    """Where a member and the reference part: per term the largest difference over the steps,
    |a - b| / max(1, |b|) (absolute below 1, relative above: DALR's brackets reach 50), and the
    step (1-based) it is at; the largest difference of any weight or BatchNorm statistic at the
    end."""

    terms: dict[str, tuple[float, int]]
    weights: float
    worst_weight: str

    @property
    def worst(self) -> float:
        return max([g for g, _ in self.terms.values()] + [self.weights])

    def line(self) -> str:
        per = ", ".join(f"{k} {g:.1e}@{s}" for k, (g, s) in self.terms.items())
        return f"terms {per}; weights {self.weights:.1e} ({self.worst_weight})"


def gaps(trainer: ArrayTrainer, j: int, ours: list[dict[str, float]], student: ref.RefStudent,
         trace: ref.Trace) -> Gaps:
    """Every term of every step (the same names on both sides), every weight and buffer."""
    assert len(ours) == len(trace.terms) == trainer.total_steps >= 20
    terms: dict[str, tuple[float, int]] = {}
    for step, (a, b) in enumerate(zip(ours, trace.terms, strict=True), start=1):
        assert set(a) == set(b), (step, sorted(a), sorted(b))
        for k in b:
            g = abs(a[k] - b[k]) / max(1.0, abs(b[k]))
            if not g <= terms.get(k, (-1.0, 0))[0]:
                terms[k] = (g, step)
    mine = member_weights(trainer, j)
    theirs = {k: v for k, v in student.state_dict().items() if v.dtype.is_floating_point}
    assert set(theirs) <= set(mine), sorted(set(theirs) - set(mine))
    diffs = {k: (mine[k] - v.to(mine[k].dtype)).abs().max().item() for k, v in theirs.items()}
    worst = max(diffs, key=lambda k: diffs[k])
    return Gaps(terms, diffs[worst], worst)


def train(trainer: ArrayTrainer) -> dict[str, list[dict[str, float]]]:
    """Every member's terms at every step."""
    out: dict[str, list[dict[str, float]]] = {m.key: [] for m in trainer.members}
    for _ in range(trainer.total_steps):
        for k, terms in trainer.train_step().items():
            out[k].append({name: float(v) for name, v in terms.items()})
    return out


@pytest.mark.parametrize("method,dtype", [("mcse", torch.float64), ("kdmcse", torch.float64),
                                          ("dalr", torch.float64), ("dalr", torch.float32)])
def test_one_member_and_an_array_of_three_end_where_the_official_loop_ends(world, method, dtype):
    tol = TOL64 if dtype == torch.float64 else TOL
    lrs = (1e-4, 2e-4, 3e-4)
    cfgs = [member(world, method, seed, lr) for seed, lr in zip((0, 1, 2), lrs, strict=True)]
    for members in ([("solo", cfgs[0])], [(f"m{i}", c) for i, c in enumerate(cfgs)]):
        trainer = array(members, dtype)
        refs = [reference_run(world, trainer, j, method, c, dtype) for j, (_, c) in enumerate(members)]
        ours = train(trainer)
        for j, ((k, _), (student, trace)) in enumerate(zip(members, refs, strict=True)):
            assert trace.kinds.count("pair") == EPOCHS * PAIR_STEPS
            # clipping bites, on every caption step at least (seen: norms up to 90)
            assert sum(n > 1.0 for n in trace.grad_norms) >= trace.kinds.count("pair")
            g = gaps(trainer, j, ours[k], student, trace)
            print(f"{method} {str(dtype)[6:]} {k}: {g.line()}")
            assert g.worst < tol, g.line()


def test_dalr_equals_the_official_reading_in_float64_term_by_term(world):
    """DALR over 64 steps, 24 of them caption steps, at the issue's lr 5e-4: every term (text,
    consistency, CMA, info, IMA, ListMLE, global-local, the two brackets, the total) at every
    step, every weight and both aligners' BatchNorm statistics at the end, within 1e-10."""
    cfg = dalr_config(world)
    trainer = array([("solo", cfg)], torch.float64)
    student, trace = reference_run(world, trainer, 0, "dalr", cfg, torch.float64)
    g = gaps(trainer, 0, train(trainer)["solo"], student, trace)
    print("dalr float64:", g.line())
    assert trace.kinds.count("pair") == 4 * PAIR_STEPS
    assert set(g.terms) == {"text", *ref.DALR_TERMS, "cross", "intra", "total"}
    assert g.worst < TOL64, g.line()


@pytest.fixture(scope="module")
def table3(world):
    """DALR's Table 3 cells (``search_spaces/dalr_table3.py``) as one float64 array, as the grid
    packs them: each cell's switches on the same seed, data and initial weights."""
    base = dalr_config(world, epochs=2)
    members = [(name, base.with_overrides({k: v for k, v in ablation(name).items()
                                           if k != "objective.method"}))
               for name in TABLE3_CELLS]
    trainer = array(members, torch.float64)
    refs = {name: reference_run(world, trainer, j, "dalr", cfg, torch.float64,
                                drop=dropped(cfg))
            for j, (name, cfg) in enumerate(members)}
    return trainer, train(trainer), refs


def dropped(cfg: RunConfig) -> set[str]:
    """The DALR terms a cell's switches leave out (tests/official_loop.py names)."""
    return {t for t in ref.DALR_TERMS if not getattr(cfg.objective, f"use_{t}")}


@pytest.mark.slow  # the array of nine and nine references: 30 s quiet, two minutes on a loaded CI
@pytest.mark.parametrize("cell", TABLE3_CELLS)
def test_dalr_table3_cells_equal_the_official_reading_in_float64(table3, cell):
    """Each cell drops its terms from the code's sums (``_dalr_ablation.py``); the official code has
    no switches, so its reading is the code with those addends removed, everything else computed
    as before (the consistency module still runs, so its BatchNorm statistics still move)."""
    trainer, ours, refs = table3
    j = [m.key for m in trainer.members].index(cell)
    student, trace = refs[cell]
    g = gaps(trainer, j, ours[cell], student, trace)
    print(f"{cell}: {g.line()}")
    assert g.worst < TOL64, g.line()


def test_kdmcse_threshold_filter_equals_the_official_reading_in_float64(world, grouped):
    """KDMCSE with ``--using_threshhold`` at a score_base that removes some negatives of every
    caption batch (a caption's same-group images and CLIP captions) and never all: every term at
    every step and every weight within 1e-10 over 32 steps, 12 of them caption steps; the filter
    changes the run (without it the reference parts by far more)."""
    path, pairs = grouped
    cfg = member(world, "kdmcse", 0, 5e-4).with_overrides(
        {"data.pairs": str(path), "objective.threshold": SCORE_BASE})
    trainer = array([("solo", cfg)], torch.float64)
    student, trace = reference_run(world, trainer, 0, "kdmcse", cfg, torch.float64, pairs=pairs,
                                   score_base=SCORE_BASE)
    _, unfiltered = reference_run(world, trainer, 0, "kdmcse", cfg, torch.float64, pairs=pairs)
    ours = train(trainer)["solo"]
    masked = trainer.members[0].record.masked
    assert len(masked) == trace.kinds.count("pair") == EPOCHS * PAIR_STEPS
    assert all(0.05 < f < 0.95 for f in masked), masked
    g = gaps(trainer, 0, ours, student, trace)
    print(f"kdmcse threshold float64 (masked {min(masked):.2f}-{max(masked):.2f}): {g.line()}")
    assert g.worst < TOL64, g.line()
    apart = max(abs(a["total"] - b["total"]) for a, b in zip(ours, unfiltered.terms, strict=True))
    assert apart > 1e-3, apart


# --- the comparison is not vacuous --------------------------------------------------------
def _listmle_floor(monkeypatch):
    orig = ref.list_mle
    monkeypatch.setattr(ref, "list_mle", lambda t, s, gen, gamma=1.0: orig(t, s, gen, gamma, eps=0.0))


def _g2l_padding_unmasked(monkeypatch):
    orig = ref.g2l
    monkeypatch.setattr(ref, "g2l", lambda loc, m, temp, mask: orig(loc, m, temp, torch.ones_like(mask)))


def _kl_temperatures_swapped(monkeypatch):
    orig = ref.kl
    monkeypatch.setattr(ref, "kl", lambda logits, soft: orig(logits, soft, 0.5, 0.45))


def _one_batchnorm_update(monkeypatch):
    """The rolled call leaves the running statistics alone (momentum 0 for it)."""
    orig = ref.RefStudent.consistency

    def consistency(self, text, image):
        second = getattr(self, "_calls", 0) % 2 == 1
        self._calls = getattr(self, "_calls", 0) + 1
        bns = [m for m in (*self.text_aligner, *self.image_aligner) if isinstance(m, torch.nn.BatchNorm1d)]
        if second:
            for bn in bns:
                bn.momentum = 0.0
        try:
            return orig(self, text, image)
        finally:
            for bn in bns:
                bn.momentum = 0.1

    monkeypatch.setattr(ref.RefStudent, "consistency", consistency)


def _aligners_in_eval_mode(monkeypatch):
    orig = ref.RefStudent.train

    def train_mode(self, mode=True):
        orig(self, mode)
        self.text_aligner.eval()
        self.image_aligner.eval()
        return self

    monkeypatch.setattr(ref.RefStudent, "train", train_mode)


CHANGED_RULES: dict[str, tuple[Callable | None, dict]] = {
    "ListMLE without its 1e-7 floor": (_listmle_floor, {}),
    "global-local term without its padding masks": (_g2l_padding_unmasked, {}),
    "KL temperatures swapped": (_kl_temperatures_swapped, {}),
    "one BatchNorm update a caption step": (_one_batchnorm_update, {}),
    "aligners in eval mode": (_aligners_in_eval_mode, {}),
    "teachers in train mode": (None, {"tweak": lambda s, ts: [t.bert.train() for t, _ in ts]}),
    "BatchNorm momentum 0.2": (None, {"tweak": lambda s, ts: [
        setattr(m, "momentum", 0.2) for m in (*s.text_aligner, *s.image_aligner)
        if isinstance(m, torch.nn.BatchNorm1d)]}),
    "no clipping": (None, {"max_norm": math.inf}),
}


@pytest.fixture(scope="module")
def dalr64(world):
    """One float64 DALR member over 32 steps (12 caption steps), its initial state and its terms,
    for the changed rules to part from; the unchanged reference agrees with it."""
    cfg = dalr_config(world, epochs=2)
    trainer = array([("solo", cfg)], torch.float64)
    state = trainer.model.member_state(0)
    student, trace = reference_run(world, trainer, 0, "dalr", cfg, torch.float64)
    ours = train(trainer)["solo"]
    g = gaps(trainer, 0, ours, student, trace)
    assert g.worst < TOL64, g.line()
    return cfg, trainer, state, ours


@pytest.mark.slow  # a reference run each, eight of them: about a minute on a loaded CI
@pytest.mark.parametrize("rule", CHANGED_RULES)
def test_the_comparison_sees_a_changed_rule(world, dalr64, monkeypatch, rule):
    """A reference that breaks one official rule parts from the member far above TOL64: the
    float64 agreement above is evidence that the project follows each of these rules. (Summing
    the terms in another order is a rule no comparison can see: it moves the last bit only.)"""
    cfg, trainer, state, ours = dalr64
    patch, kwargs = CHANGED_RULES[rule]
    if patch is not None:
        patch(monkeypatch)
    student, trace = reference_run(world, trainer, 0, "dalr", cfg, torch.float64, state=state,
                                   **kwargs)
    g = gaps(trainer, 0, ours, student, trace)
    print(f"{rule}: {g.line()}")
    assert g.worst > 1e4 * TOL64, g.line()


def test_listmle_tie_break_draws_from_the_members_stream():
    """With teacher scores that tie and student scores that do not, ListMLE's value depends on its
    tie-break permutation: the project's loss (``listmle_loss``) and the reference's official
    ``ListMLE.forward`` agree when they draw from the same stream, one ``randperm(bs)`` a call,
    and not when they draw from different ones. The loop hands both the member's stream
    (``reference_run``), so a tie in a real run breaks the same way on both sides."""
    from trainables.objectives.dalr import listmle_loss

    rng = np.random.default_rng(0)
    student = torch.from_numpy(rng.standard_normal((6, 6)) * 10)
    # many ties, none at -1 (the official mask of teacher == -1 scores, which cos / 0.05 teacher
    # scores never hit exactly, is left out of the project's loss)
    teacher = torch.from_numpy(np.round(rng.standard_normal((6, 6)), 0) + 0.5)
    values = {}
    for seed in (0, 1):
        g_ours, g_ref = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        ours = [float(listmle_loss(student, teacher, generator=g_ours)) for _ in range(3)]
        theirs = [float(ref.list_mle(teacher, student, g_ref)) for _ in range(3)]
        assert ours == pytest.approx(theirs, rel=1e-14, abs=0)
        values[seed] = ours
    assert max(abs(a - b) for a, b in zip(values[0], values[1], strict=True)) > 1e-3


@pytest.mark.parametrize("method", ["mcse", "dalr"])
def test_the_reference_tells_torch_adamw_apart(world, method):
    """optimizer=torch (eps after the bias correction, a head without a gradient skipped) ends far
    from the official loop: the comparison above is not vacuous (seen at lr 3e-4: MCSE losses
    1.4e-1 and weights 1.4e-3 apart, DALR 1.8e-2 and 9.4e-4)."""
    cfg = member(world, method, 0, 3e-4).with_overrides({"optimizer": "torch"})
    trainer = array([("solo", cfg)], torch.float32)
    student, trace = reference_run(world, trainer, 0, method, cfg)
    losses = [float(trainer.train_step()["solo"]["total"]) for _ in range(trainer.total_steps)]
    gap = np.abs(np.array(losses) - np.array(trace.losses)).max()
    ours = member_weights(trainer, 0)
    weights = max((ours[k] - v).abs().max().item() for k, v in student.state_dict().items()
                  if v.dtype.is_floating_point and not is_bn_stat(k))
    print(f"{method}: optimizer=torch ends {gap:.3g} (losses), {weights:.3g} (weights) away")
    assert gap > 1e-2 and weights > 10 * TOL


def test_max_steps_above_the_epochs_adds_epochs_and_the_lr_decays_over_it(world):
    """As the official --max_train_steps: 40 steps of a 2 x 16-step config train a third epoch
    (cut short) and the learning rate reaches 0 at step 40, not at step 32."""
    cfg = member(world, "mcse", 0, 1e-4).with_overrides({"max_steps": 40})
    trainer = ArrayTrainer([("solo", cfg)])
    assert trainer.total_steps == trainer.optimizer.total == 40
    lrs = []
    for _ in range(40):
        lrs.append(trainer.optimizer.current_lrs()[0])
        trainer.train_step()
    assert lrs[32] == pytest.approx(1e-4 * (1 - 32 / 40)) and lrs[-1] == pytest.approx(1e-4 / 40)
    assert trainer.members[0].schedule.global_step == 40
