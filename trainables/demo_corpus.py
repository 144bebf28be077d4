"""A small synthetic grounded corpus so the default job runs on a laptop with no data and no internet.

How it is made (deterministic from ``seed``; under a second on one core for the defaults:
300 scenes x 2 captions, 2,000 text sentences, STS-B dev 200 pairs, 100 test pairs per task):
  - A *scene* is five slots: count, attribute (or none), subject, action, place, each drawn from a
    small vocabulary of everyday words a BERT / MiniLM tokenizer knows.
  - A scene is rendered as a caption by a template ("there are two dogs running on the beach .",
    "in the park , an old man is sitting .") with a synonym chosen per slot ("dog"/"puppy",
    "running"/"jogging"), so the captions of one scene are paraphrases.
  - Teacher features (stand-ins for CLIP image / text outputs) live in one concept space: every slot
    value has a fixed random unit vector. The "image" of a scene is the weighted sum of its concept
    vectors plus scene-specific noise (visual detail no caption mentions); the "CLIP text" feature of
    a caption is built from the caption's own words (concept vector nudged by a per-synonym vector)
    plus noise. Each modality gets a shared offset (CLIP's modality gap and anisotropy), and the
    vectors are scaled to a norm of about ``feature_norm`` with jitter, i.e. *not* normalised.
    Hence a caption is close to its image, paraphrases are close, scenes that differ in one slot
    (30 % of pair scenes are such near-duplicates of an earlier one) are close, unrelated far.
  - Norm choice: real CLIP outputs have norms of order 10 (not measured here; docs/official-code.md
    §9 item 2), at which every raw image-text dot product would pass KDMCSE's ``score_base`` 0.8 and
    the filter would mask all negatives. The default ``feature_norm`` of 1.1 puts raw dot products on
    a cosine-like scale where 0.8 means "same or nearly the same scene". Measured on the defaults
    (seed 0): caption-image raw dot products exceed 0.8 for 99.5 % of other-caption-same-image
    pairs, 37 % of one-slot near-duplicates, 3 % of two-slot ones and none beyond; image-image
    cosines (KDMCSE's adaptive margin uses Delta = 1 - cos) have medians 0.71 / 0.53 / 0.33 / 0.16
    / 0.07 for 1..5 differing slots; a caption and its own image have cosine 0.81 on average.
  - Text-only corpus (Wiki1M format: one sentence a line) from scenes disjoint from the pairs and
    the STS scenes. STS pairs: a fresh scene against a paraphrase or a copy with 1-5 slots changed;
    gold = weighted share of equal slots, mapped to 0-5 (SICK: 1-5), plus noise, 0.2 steps.
    Written in SentEval's layout (official subset names), so ``evaluation.evaluate_sts`` reads it.
What it cannot show: there is no real visual signal (the "image" is a function of the words), gold
scores are driven by slot overlap (lexical, not graded meaning: "man" vs "woman" counts as much as
"man" vs "dog"), and absolute scores are not comparable to the papers'. The STS side is easy for
a trained sentence encoder: on the demo STS-B test (seed 0) MiniLM-L6 with mean pooling scores
93.6, a bag-of-words count vector 70.7, random vectors about 0 (Spearman x 100).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from trainables.evaluation import STS_SUBSETS
from trainables.filelock import file_lock

VERSION = 1
SLOTS = ("count", "attr", "subject", "action", "place")
FEATURE_WEIGHTS = {"count": 0.35, "attr": 0.5, "subject": 1.0, "action": 0.8, "place": 0.7}
GOLD_WEIGHTS = {"count": 0.1, "attr": 0.15, "subject": 0.3, "action": 0.25, "place": 0.2}
COUNTS = {
    "one": ("a", "one"), "two": ("two", "a pair of"), "three": ("three",),
    "many": ("several", "a group of", "many"),
}
ATTRS = {
    "none": ("",), "small": ("small", "little", "tiny"), "large": ("large", "big"),
    "old": ("old", "elderly"), "young": ("young",), "happy": ("happy", "smiling", "cheerful"),
    "tired": ("tired", "sleepy"), "brown": ("brown",), "black": ("black", "dark"),
    "white": ("white",), "wet": ("wet", "soaked"),
}
SUBJECTS = {  # concept -> ((singular forms), (plural forms)), aligned
    "man": (("man", "guy"), ("men", "guys")), "woman": (("woman", "lady"), ("women", "ladies")),
    "boy": (("boy",), ("boys",)), "girl": (("girl",), ("girls",)),
    "child": (("child", "kid"), ("children", "kids")), "dog": (("dog", "puppy"), ("dogs", "puppies")),
    "cat": (("cat", "kitten"), ("cats", "kittens")), "horse": (("horse", "pony"), ("horses", "ponies")),
    "bird": (("bird",), ("birds",)), "player": (("player", "athlete"), ("players", "athletes")),
    "student": (("student",), ("students",)), "worker": (("worker",), ("workers",)),
}
ACTIONS = {
    "run": ("running", "jogging"), "jump": ("jumping", "leaping"), "sit": ("sitting", "resting"),
    "stand": ("standing", "waiting"), "walk": ("walking", "strolling"),
    "ball": ("playing with a ball", "chasing a ball"), "eat": ("eating", "having lunch"),
    "sleep": ("sleeping", "napping"), "swim": ("swimming",), "climb": ("climbing", "climbing up"),
    "bike": ("riding a bike", "riding a bicycle", "cycling"), "dance": ("dancing",),
    "look": ("looking around", "watching"),
}
PLACES = {
    "park": ("in the park", "at the park"), "beach": ("on the beach", "on the shore", "by the sea"),
    "street": ("on the street", "on the road", "down the street"),
    "field": ("in a field", "in the grass", "in a meadow"),
    "snow": ("in the snow", "through the snow"), "lake": ("in the lake", "in the water"),
    "kitchen": ("in the kitchen",), "forest": ("in the woods", "in the forest"),
    "city": ("in the city", "downtown"), "garden": ("in the garden", "in the yard"),
    "hill": ("on a hill", "on the mountain"), "stage": ("on stage", "on a stage"),
}
VOCAB = {"count": COUNTS, "attr": ATTRS, "subject": SUBJECTS, "action": ACTIONS, "place": PLACES}
TEMPLATES = (
    "{np} {aux} {act} {place} .", "{np} {act} {place} .", "there {aux} {np} {act} {place} .",
    "{place} , {np} {aux} {act} .", "{np} {place} {aux} {act} .", "{np} can be seen {act} {place} .",
)
SYNONYM_SHIFT = 0.35  # how far a synonym's text vector moves from its concept (paraphrases close, not equal)


@dataclass(frozen=True)
class DemoCorpus:
    root: Path
    text_file: Path
    pairs_store: Path
    senteval_dir: Path
    manifest: Path


def _forms(slot: str, concept: str, plural: bool) -> tuple[str, ...]:
    value = VOCAB[slot][concept]
    return value[int(plural)] if slot == "subject" else value


def _render(
    scene: tuple[str, ...], rng: np.random.Generator, template: int
) -> tuple[str, list[tuple[str, str, str]]]:
    """Caption text and the (slot, concept, form) words it used."""
    plural = scene[0] != "one"
    used = []
    for slot, concept in zip(SLOTS, scene, strict=True):
        forms = _forms(slot, concept, plural)
        used.append((slot, concept, forms[rng.integers(len(forms))]))
    count, attr, subj, act, place = (u[2] for u in used)
    if count == "a" and (attr or subj)[0] in "aeiou":
        count = "an"
    np_ = " ".join(w for w in (count, attr, subj) if w)
    text = TEMPLATES[template].format(np=np_, aux="are" if plural else "is", act=act, place=place)
    return text, used


def _random_scene(rng: np.random.Generator) -> tuple[str, ...]:
    return tuple(str(rng.choice(list(VOCAB[s]))) for s in SLOTS)


def _mutate(scene: tuple[str, ...], rng: np.random.Generator, k: int) -> tuple[str, ...]:
    """Change k distinct slots to a different value."""
    out = list(scene)
    for i in rng.choice(len(SLOTS), size=k, replace=False):
        out[i] = str(rng.choice([c for c in VOCAB[SLOTS[i]] if c != scene[i]]))
    return tuple(out)


def _paraphrases(scene, rng, n) -> list[tuple[str, list]]:
    out, seen = [], set()
    for t in rng.permutation(len(TEMPLATES)).tolist() * 3:
        text, used = _render(scene, rng, t)
        if text not in seen:
            seen.add(text)
            out.append((text, used))
        if len(out) == n:
            break
    return out


class _Space:
    """Fixed random unit vectors per concept and per surface form, plus modality offsets."""

    def __init__(self, rng: np.random.Generator, dim: int):
        def unit(n):
            x = rng.standard_normal((n, dim))
            return x / np.linalg.norm(x, axis=1, keepdims=True)

        keys = [(s, c) for s in SLOTS for c in VOCAB[s]]
        self.concept = dict(zip(keys, unit(len(keys)), strict=True))
        forms = sorted(
            {(s, c, f) for s in SLOTS for c in VOCAB[s] for p in (False, True) for f in _forms(s, c, p)}
        )
        self.form = dict(zip(forms, unit(len(forms)), strict=True))
        self.offset_img, self.offset_txt = unit(2)
        self.dim = dim

    def image(self, scene, rng, noise=0.35, gap=0.3) -> np.ndarray:
        v = sum(FEATURE_WEIGHTS[s] * self.concept[(s, c)] for s, c in zip(SLOTS, scene, strict=True))
        return self._finish(v, self.offset_img, rng, noise, gap)

    def text(self, used, rng, noise=0.2, gap=0.3) -> np.ndarray:
        v = sum(
            FEATURE_WEIGHTS[s] * (self.concept[(s, c)] + SYNONYM_SHIFT * self.form[(s, c, f)])
            for s, c, f in used
        )
        return self._finish(v, self.offset_txt, rng, noise, gap)

    def _finish(self, v, offset, rng, noise, gap) -> np.ndarray:
        scale = np.linalg.norm(v)
        v = v + noise * scale * rng.standard_normal(self.dim) / np.sqrt(self.dim) + gap * scale * offset
        return v / np.linalg.norm(v)


def _gold(a: tuple[str, ...], b: tuple[str, ...], rng: np.random.Generator, lo: float) -> float:
    share = sum(GOLD_WEIGHTS[s] for s, x, y in zip(SLOTS, a, b, strict=True) if x == y)
    g = lo + (5.0 - lo) * share + rng.normal(0, 0.2)
    return float(np.round(np.clip(g, lo, 5.0) * 5) / 5)  # 0.2 steps, like averaged annotator grades


def _sts_pairs(rng, n, lo, taken) -> list[tuple[str, str, float]]:
    out = []
    while len(out) < n:
        base = _random_scene(rng)
        k = int(rng.integers(0, 6))  # 0 = paraphrase, 5 = (nearly) unrelated
        other = _mutate(base, rng, k)
        if base in taken or other in taken:  # keep evaluation scenes out of the training data
            continue
        if k == 0:
            (s1, _), (s2, _) = _paraphrases(base, rng, 2)
        else:
            s1 = _render(base, rng, int(rng.integers(len(TEMPLATES))))[0]
            s2 = _render(other, rng, int(rng.integers(len(TEMPLATES))))[0]
        taken.update((base, other))
        out.append((s1, s2, _gold(base, other, rng, lo)))
    return out


def _write_senteval(root: Path, rng, n_dev: int, n_test: int, taken: set) -> None:
    for task, subsets in STS_SUBSETS.items():
        folder = root / "STS" / f"{task}-en-test"
        folder.mkdir(parents=True)
        pairs = _sts_pairs(rng, n_test, 0.0, taken)
        for j, sub in enumerate(subsets):
            part = pairs[j :: len(subsets)]
            (folder / f"STS.input.{sub}.txt").write_text("".join(f"{a}\t{b}\n" for a, b, _ in part))
            (folder / f"STS.gs.{sub}.txt").write_text("".join(f"{g:.1f}\n" for *_, g in part))
    bench = root / "STS" / "STSBenchmark"
    bench.mkdir(parents=True)
    for split, n in (("dev", n_dev), ("test", n_test)):
        rows = _sts_pairs(rng, n, 0.0, taken)
        lines = [
            f"main-captions\tdemo\t2024{split}\t{i:04d}\t{g:.3f}\t{a}\t{b}\n"
            for i, (a, b, g) in enumerate(rows)
        ]
        (bench / f"sts-{split}.csv").write_text("".join(lines))
    (root / "SICK").mkdir()
    rows = _sts_pairs(rng, n_test, 1.0, taken)
    lines = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"]
    lines += [f"{i + 1}\t{a}\t{b}\t{g:.1f}\tNEUTRAL\n" for i, (a, b, g) in enumerate(rows)]
    (root / "SICK" / "SICK_test_annotated.txt").write_text("".join(lines))


def _pair_scenes(rng: np.random.Generator, n: int) -> list[tuple[str, ...]]:
    """Distinct scenes; 30 % are one-slot variants of an earlier one (near-duplicates)."""
    scenes: dict[tuple[str, ...], None] = {}
    while len(scenes) < n:
        if scenes and rng.random() < 0.3:
            scene = _mutate(list(scenes)[rng.integers(len(scenes))], rng, 1)
        else:
            scene = _random_scene(rng)
        scenes.setdefault(scene)
    return list(scenes)


def _jitter(v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return v * (1 + 0.05 * rng.standard_normal())  # norms vary, like real unnormalised CLIP outputs


def _build(tmp: Path, cfg: dict) -> None:
    from trainables.store import StoreMetadata, write_store

    seeds = np.random.SeedSequence(cfg["seed"]).spawn(4)  # independent streams per part
    r_space, r_pairs, r_sts, r_text = (np.random.default_rng(s) for s in seeds)
    space = _Space(r_space, cfg["dim"])
    scenes = _pair_scenes(r_pairs, cfg["n_scenes"])
    norm = cfg["feature_norm"]
    captions, image_ids, img, txt = [], [], [], []
    for i, scene in enumerate(scenes):
        v = _jitter(norm * space.image(scene, r_pairs), r_pairs)
        for text, used in _paraphrases(scene, r_pairs, cfg["captions_per_scene"]):
            captions.append(text)
            image_ids.append(f"demo-{i:05d}")
            img.append(v)
            txt.append(_jitter(norm * space.text(used, r_pairs), r_pairs))
    taken = set(scenes)
    senteval = tmp / "senteval"
    _write_senteval(senteval, r_sts, cfg["n_dev"], cfg["n_test"], taken)
    lines: dict[str, None] = {}
    for _ in range(50 * cfg["n_text"]):  # bounded: the scene space (~2M renderings) never runs dry
        scene = _random_scene(r_text)
        if scene not in taken:
            lines.setdefault(_render(scene, r_text, int(r_text.integers(len(TEMPLATES))))[0])
        if len(lines) == cfg["n_text"]:
            break
    (tmp / "text.txt").write_text("".join(f"{s}\n" for s in lines))
    meta = StoreMetadata(
        image_teacher="demo-scene", image_dim=cfg["dim"], text_teacher="demo-scene-text",
        text_dim=cfg["dim"], normalized=False, extra={"demo": cfg},
    )
    write_store(tmp / "pairs.parquet", captions, image_ids,
                {"image": np.asarray(img, np.float32), "clip_text": np.asarray(txt, np.float32)}, meta)


def generate_demo(
    cache_dir: str | os.PathLike,
    seed: int = 0,
    n_scenes: int = 300,
    captions_per_scene: int = 2,
    n_text: int = 2000,
    dim: int = 512,
    n_dev: int = 200,
    n_test: int = 100,
    feature_norm: float = 1.1,
) -> DemoCorpus:
    """Generate (or reuse from ``cache_dir``) the demo corpus; returns its paths.

    The corpus lives in ``cache_dir/demo-v<VERSION>-<hash of the settings>``; a folder whose
    manifest matches is reused as is. Generation writes to a temporary folder and renames it.
    """
    if not 1 <= captions_per_scene <= len(TEMPLATES):
        raise ValueError(f"captions_per_scene={captions_per_scene}: must be 1..{len(TEMPLATES)}")
    sizes = {"n_scenes": n_scenes, "n_text": n_text, "dim": dim, "n_dev": n_dev, "n_test": n_test}
    for name, value in sizes.items():
        if value < 2:
            raise ValueError(f"{name}={value}: must be at least 2")
    if n_scenes > 20000:
        raise ValueError(f"n_scenes={n_scenes}: the scene vocabulary supports at most 20000 distinct scenes")
    if not feature_norm > 0:
        raise ValueError(f"feature_norm={feature_norm}: must be positive")
    cfg = dict(version=VERSION, seed=int(seed), n_scenes=n_scenes, captions_per_scene=captions_per_scene,
               n_text=n_text, dim=dim, n_dev=n_dev, n_test=n_test, feature_norm=float(feature_norm))
    digest = hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:10]
    cache = Path(cache_dir)
    root = cache / f"demo-v{VERSION}-{digest}"
    corpus = DemoCorpus(
        root, root / "text.txt", root / "pairs.parquet", root / "senteval", root / "manifest.json"
    )
    if _valid(corpus, cfg):
        return corpus
    cache.mkdir(parents=True, exist_ok=True)
    with file_lock(cache / f".{root.name}.lock"):  # one builder; the others wait, then reuse
        if not _valid(corpus, cfg):
            _build_into(root, cfg, cache, corpus)
    return corpus


def _build_into(root: Path, cfg: dict, cache: Path, corpus: DemoCorpus) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=cache))
    try:
        _build(tmp, cfg)
        (tmp / "manifest.json").write_text(json.dumps(cfg, sort_keys=True, indent=1) + "\n")
        if root.exists():
            shutil.rmtree(root)  # stale or half-deleted copy with a non-matching manifest
        os.replace(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _valid(corpus: DemoCorpus, cfg: dict) -> bool:
    try:
        ok = json.loads(corpus.manifest.read_text()) == cfg
    except (OSError, ValueError):
        return False
    return ok and corpus.text_file.is_file() and corpus.pairs_store.is_file() and corpus.senteval_dir.is_dir()


def as_dict(corpus: DemoCorpus) -> dict[str, str]:
    """Paths as strings (for logging / run configs)."""
    return {k: str(v) for k, v in asdict(corpus).items()}
