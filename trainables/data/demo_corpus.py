"""The demo world: a generated grounded corpus whose controls have known answers, offline.

Why a world of its own: on the v1 corpus (captions rendered from five slots, gold = lexical
overlap of the slots) MiniLM-L6 already scored 93, so a short run moved no Spearman rank and every
table3 cell came out identical. This world gives each method's mechanism something real to act on,
and a student with room to learn (trainables/config/profiles.py ``DEMO``). Everything is deterministic
from ``seed``: 400 images x 2 captions, 2,000 text lines, STS-B dev 200 pairs, 100 pairs per test
task (1,400 test sentences, 400 dev), generated in about a second.

Mechanisms, and what each one gives a method:

1. Words are aliases; the images know which (grounding adds what text lacks). A scene is five
   slots (attribute, subject, action, place, time); each slot value is a *concept* said with one of
   2-3 words ("dog" / "puppy" / "hound", "on the beach" / "by the sea"), chosen at random per
   caption. Concepts come in groups of visual kin (person / pet / farm / wild animals; fast /
   calm / leisure actions; water / green / urban / indoor places ...). The image feature is a
   function of the concepts alone, so it says which words name one concept and which concepts are
   kin. The text corpus cannot: every slot is drawn independently of the others, so a word's
   contexts carry no hint of its meaning. Images carry nothing the caption leaves out of the
   *scene* (captions name all five slots); they carry the meaning of the words.
2. STS gold is the full scene, not the words: 5 x sum_s w_s sim_s (``WEIGHTS``; sim 1 for the same
   concept, ``GROUP_CREDIT`` for a kin concept, 0 else; SICK: 1-5) plus annotator noise, in 0.2
   steps. Paraphrases often share no content word. Bag of words: 37.8 STS avg; an encoder that
   knows the lexicon (``lexicon_oracle``): 98.3, the ceiling; the untrained demo student
   ([CLS] before the MLP, as training evaluates it): 61.9.
3. Teacher similarities are informative. Concept vectors are a group direction plus their own
   (kin cosine about 0.5); the image is the slot-weighted sum (same ``WEIGHTS`` as the gold) plus
   visual noise and a modality offset; the "CLIP text" feature of a caption is the same from its
   concepts, each nudged by its word (``ALIAS_SHIFT``), plus noise. Spearman with the scenes'
   similarity: image-image cosine 0.93, CLIP-text cosine 0.93 (STS-B dev gold: 0.99). So KDMCSE's
   adaptive margin (Delta = 1 - teacher cosine) and its CLIP-text term have a real signal.
4. Near-duplicates in every batch (false negatives). Images come in families of 12: a base scene
   re-photographed or varied in 1-2 slots (as a caption set holds many photos of "a dog running
   on a beach"), spread over the store; 94 % of random caption batches of 16 hold a pair of scenes
   with similarity >= 0.7. Features are stored unnormalised at norm ~1.25 (5 % jitter), so the
   filter's threshold 0.8 on RAW caption-image dot products means cosine >~ 0.64 ("the same or
   nearly the same scene"). It masks 4.8 % of the negatives of a typical caption batch (every
   batch masks some): all other captions of the same image, and scenes of similarity 0.69 on
   average (the kept negatives: 0.20). Real CLIP outputs have norms of order 10, at which every
   raw dot product passes 0.8 and the filter would mask all negatives.
5. Sizes: 800 pairs against 2,000 text lines make the official alternation put a caption batch
   on every second step (trainables/data/schedule.py), so 60 steps hold 30 grounded batches.

Training on it with the demo profile, MCSE beats text-only SimCSE by several points, MCSE grounded
on the wrong images (``data.shuffle_images``) loses that gain, and MCSE against MCSE on other seeds
differs by about the seed noise: the figures, with their commands, are in bench/README.md
("demo_world.py"), which also re-measures the world's properties quoted above.

What it can show: that the pipeline sees an effect that is there (MCSE vs SimCSE), seed noise
(MCSE vs MCSE), that a filter or margin changes the runs. What it cannot: real visual signal (the
"image" is a function of the words' concepts), magnitudes comparable to the papers', or whether
KDMCSE's filter and margin help on real data. The world was not tuned for them: its settings were
chosen from the mechanism checks above and the positive control only, so their demo numbers say
how they behave here, nothing more. The lexicon is small (123 words) and the grammar fixed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainables.evaluation.sts import STS_SUBSETS
from trainables.runtime.created import building
from trainables.runtime.filelock import file_lock

VERSION = 2
SLOTS = ("attr", "subject", "action", "place", "time")
WEIGHTS = {"attr": 0.15, "subject": 0.3, "action": 0.25, "place": 0.2, "time": 0.1}
"""share of each slot in the gold score and in the teacher features (one table: teacher
similarity then tracks gold by construction, up to noise)"""
GROUP_CREDIT = 0.5
"""gold credit of a slot whose two concepts differ but share a group (visual kinship)"""
GROUP_SHARE = 0.5
"""squared share of the group direction in a concept vector: same-group cosine about 0.5"""
ALIAS_SHIFT = 0.25
"""how far a CLIP-text feature moves per word from its concept (CLIP knows synonyms, not as equal)"""
TEXT_NOISE = 0.2
"""noise of a CLIP-text feature, relative to its norm (the image's is ``image_noise``)"""
MODALITY_GAP = 0.3
"""shared offset per modality, relative to the norm: CLIP's modality gap and anisotropy"""
# slot -> group -> concept -> aliases; one concept, several words (the images tell which)
LEXICON: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {
    "attr": {
        "age": {"young": ("young", "youthful"), "old": ("old", "elderly", "aged")},
        "mood": {"happy": ("happy", "cheerful", "joyful"), "tired": ("tired", "sleepy", "weary"),
                 "angry": ("angry", "furious", "grumpy")},
        "colour": {"black": ("black", "dark"), "white": ("white", "pale"), "brown": ("brown", "tan")},
        "size": {"small": ("small", "little", "tiny"), "big": ("big", "large", "huge")},
    },
    "subject": {
        "person": {"man": ("man", "guy", "gentleman"), "woman": ("woman", "lady"),
                   "child": ("child", "kid", "toddler")},
        "pet": {"dog": ("dog", "puppy", "hound"), "cat": ("cat", "kitten", "kitty")},
        "farm": {"horse": ("horse", "pony", "stallion"), "cow": ("cow", "bull", "ox"),
                 "donkey": ("donkey", "mule")},
        "wild": {"deer": ("deer", "fawn"), "bear": ("bear", "cub")},
    },
    "action": {
        "fast": {"run": ("running", "jogging", "sprinting"), "jump": ("jumping", "leaping", "hopping"),
                 "climb": ("climbing", "scrambling")},
        "calm": {"walk": ("walking", "strolling", "wandering"), "sit": ("sitting", "resting"),
                 "sleep": ("sleeping", "napping", "dozing"), "stand": ("standing", "waiting")},
        "leisure": {"dance": ("dancing", "twirling"), "swim": ("swimming", "paddling"),
                    "eat": ("eating", "feeding", "snacking")},
    },
    "place": {
        "water": {"beach": ("on the beach", "on the shore", "by the sea"),
                  "lake": ("by the lake", "near the pond", "at the lakeside"),
                  "river": ("by the river", "near the stream", "along the creek")},
        "green": {"park": ("in the park", "in a garden"), "field": ("in a field", "in a meadow", "on the grass"),
                  "forest": ("in the forest", "in the woods", "among the trees")},
        "urban": {"street": ("on the street", "on the road", "down the avenue"),
                  "city": ("in the city", "downtown"), "market": ("at the market", "in the square")},
        "indoor": {"kitchen": ("in the kitchen", "by the stove"), "bedroom": ("in the bedroom", "on the bed")},
    },
    "time": {
        "day": {"morning": ("in the morning", "at dawn", "at sunrise"),
                "noon": ("at noon", "at midday")},
        "dark": {"night": ("at night", "after sundown", "at midnight"),
                 "evening": ("in the evening", "at dusk", "at sunset")},
        "weather": {"rain": ("in the rain", "during a storm", "in a downpour"),
                    "snow": ("in the snow", "during a blizzard"), "fog": ("in the fog", "in the mist")},
    },
}
GROUP = {s: {c: g for g, cs in LEXICON[s].items() for c in cs} for s in SLOTS}
ALIASES = {s: {c: a for cs in LEXICON[s].values() for c, a in cs.items()} for s in SLOTS}
CONCEPTS = {s: tuple(ALIASES[s]) for s in SLOTS}
TEMPLATES = (
    "{np} is {act} {place} {time} .", "{time} , {np} is {act} {place} .",
    "there is {np} {act} {place} {time} .", "{place} , {np} is {act} {time} .",
    "{np} {act} {place} {time} .", "{np} can be seen {act} {place} {time} .",
)

Scene = tuple[str, ...]


@dataclass(frozen=True)
class DemoCorpus:
    root: Path
    text_file: Path
    pairs_store: Path
    senteval_dir: Path
    manifest: Path


def _render(scene: Scene, rng: np.random.Generator, template: int) -> tuple[str, tuple[str, ...]]:
    """Caption text and the alias chosen per slot."""
    words = tuple(_pick(ALIASES[s][c], rng) for s, c in zip(SLOTS, scene, strict=True))
    attr, subj, act, place, time = words
    article = "an" if attr[0] in "aeiou" else "a"
    text = TEMPLATES[template].format(np=f"{article} {attr} {subj}", act=act, place=place, time=time)
    return text, words


def _pick(options: tuple[str, ...] | list[str], rng: np.random.Generator) -> str:
    return options[int(rng.integers(len(options)))]  # rng.choice on tuples is ~10x slower


def _random_scene(rng: np.random.Generator) -> Scene:
    return tuple(_pick(CONCEPTS[s], rng) for s in SLOTS)


def _mutate(scene: Scene, rng: np.random.Generator, k: int, p_kin: float = 0.5) -> Scene:
    """Change k distinct slots; each change stays in the concept's group with probability p_kin."""
    out = list(scene)
    for i in rng.choice(len(SLOTS), size=k, replace=False):
        s, c = SLOTS[i], scene[i]
        kin = [x for x in CONCEPTS[s] if x != c and GROUP[s][x] == GROUP[s][c]]
        far = [x for x in CONCEPTS[s] if GROUP[s][x] != GROUP[s][c]]
        out[i] = _pick(kin if kin and rng.random() < p_kin else far, rng)
    return tuple(out)


def scene_similarity(a: Scene, b: Scene) -> float:
    """Weighted share of equal slots, same-group slots counting GROUP_CREDIT: the gold's core."""
    total = 0.0
    for s, x, y in zip(SLOTS, a, b, strict=True):
        total += WEIGHTS[s] * (1.0 if x == y else GROUP_CREDIT if GROUP[s][x] == GROUP[s][y] else 0.0)
    return total


def parse_scene(sentence: str) -> Scene:
    """The scene a demo sentence names (the lexicon the images teach); ValueError if it is not one."""
    padded = f" {' '.join(sentence.split())} "
    out = []
    for slot in SLOTS:
        hits = {c for c, words in ALIASES[slot].items() for w in words if f" {w} " in padded}
        if len(hits) != 1:
            raise ValueError(f"{sentence!r} names {len(hits)} {slot} concepts, not one")
        out.append(hits.pop())
    return tuple(out)


def lexicon_oracle(sentences: list[str]) -> np.ndarray:
    """Embeddings whose cosine is exactly ``scene_similarity``: what an encoder that knows the
    lexicon could reach (the ceiling is then set by the gold's annotator noise alone)."""
    cols = [(s, kind, x) for s in SLOTS for kind, xs in (("g", LEXICON[s]), ("c", CONCEPTS[s])) for x in xs]
    index = {k: i for i, k in enumerate(cols)}
    out = np.zeros((len(sentences), len(cols)))
    for i, sentence in enumerate(sentences):
        for s, c in zip(SLOTS, parse_scene(sentence), strict=True):
            out[i, index[(s, "g", GROUP[s][c])]] = np.sqrt(WEIGHTS[s] * GROUP_CREDIT)
            out[i, index[(s, "c", c)]] = np.sqrt(WEIGHTS[s] * (1 - GROUP_CREDIT))
    return out


def _paraphrases(scene: Scene, rng: np.random.Generator, n: int) -> list[tuple[str, tuple[str, ...]]]:
    out, seen = [], set()
    for t in rng.permutation(len(TEMPLATES)).tolist() * 3:
        text, words = _render(scene, rng, t)
        if text not in seen:
            seen.add(text)
            out.append((text, words))
        if len(out) == n:
            break
    return out


class _Space:
    """Concept vectors (group direction + own direction), alias vectors, modality offsets."""

    def __init__(self, rng: np.random.Generator, dim: int):
        def unit(n: int) -> np.ndarray:
            x = rng.standard_normal((n, dim))
            return x / np.linalg.norm(x, axis=1, keepdims=True)

        self.dim = dim
        self.concept: dict[tuple[str, str], np.ndarray] = {}
        self.alias: dict[tuple[str, str], np.ndarray] = {}
        for s in SLOTS:
            groups = dict(zip(LEXICON[s], unit(len(LEXICON[s])), strict=True))
            for c in CONCEPTS[s]:
                v = np.sqrt(GROUP_SHARE) * groups[GROUP[s][c]] + np.sqrt(1 - GROUP_SHARE) * unit(1)[0]
                self.concept[(s, c)] = v / np.linalg.norm(v)
                for a in ALIASES[s][c]:
                    self.alias[(s, a)] = unit(1)[0]
        self.offset_img, self.offset_txt = unit(2)

    def image(self, scene: Scene, rng: np.random.Generator, noise: float, gap: float) -> np.ndarray:
        v = sum(WEIGHTS[s] * self.concept[(s, c)] for s, c in zip(SLOTS, scene, strict=True))
        return self._finish(v, self.offset_img, rng, noise, gap)

    def text(self, scene: Scene, words: tuple[str, ...], rng: np.random.Generator, noise: float,
             gap: float) -> np.ndarray:
        v = sum(
            WEIGHTS[s] * (self.concept[(s, c)] + ALIAS_SHIFT * self.alias[(s, w)])
            for s, c, w in zip(SLOTS, scene, words, strict=True)
        )
        return self._finish(v, self.offset_txt, rng, noise, gap)

    def _finish(self, v, offset, rng, noise, gap) -> np.ndarray:
        scale = np.linalg.norm(v)
        v = v + noise * scale * rng.standard_normal(self.dim) / np.sqrt(self.dim) + gap * scale * offset
        return v / np.linalg.norm(v)


def _gold(a: Scene, b: Scene, rng: np.random.Generator, lo: float) -> float:
    g = lo + (5.0 - lo) * scene_similarity(a, b) + rng.normal(0, 0.2)
    return float(np.round(np.clip(g, lo, 5.0) * 5) / 5)  # 0.2 steps, like averaged annotator grades


def _sts_pairs(rng, n, lo, taken) -> list[tuple[str, str, float]]:
    out = []
    while len(out) < n:
        base = _random_scene(rng)
        k = int(rng.integers(0, 6))  # 0 = paraphrase, 5 = every slot changed
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


def _pair_scenes(rng: np.random.Generator, n: int, family: int) -> list[Scene]:
    """Scenes in families of ``family`` images: a base scene, re-photographed (0 slots changed)
    or varied in 1-2 slots, as a caption set holds many photos of "a dog running on a beach"."""
    scenes: list[Scene] = []
    while len(scenes) < n:
        base = _random_scene(rng)
        scenes.append(base)
        for _ in range(min(family, n - len(scenes) + 1) - 1):
            scenes.append(_mutate(base, rng, int(rng.choice(3, p=(0.2, 0.5, 0.3)))))
    return scenes[:n]


def _jitter(v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return v * (1 + 0.05 * rng.standard_normal())  # norms vary, like real unnormalised CLIP outputs


def _build(tmp: Path, cfg: dict) -> None:
    from trainables.data.store import StoreMetadata, write_store

    seeds = np.random.SeedSequence(cfg["seed"]).spawn(4)  # independent streams per part
    r_space, r_pairs, r_sts, r_text = (np.random.default_rng(s) for s in seeds)
    space = _Space(r_space, cfg["dim"])
    scenes = _pair_scenes(r_pairs, cfg["n_scenes"], cfg["family"])
    order = r_pairs.permutation(len(scenes))  # families spread over the store, not in runs
    norm = cfg["feature_norm"]
    captions, image_ids, img, txt = [], [], [], []
    for i in order.tolist():
        scene = scenes[i]
        v = _jitter(norm * space.image(scene, r_pairs, cfg["image_noise"], MODALITY_GAP), r_pairs)
        for text, words in _paraphrases(scene, r_pairs, cfg["captions_per_scene"]):
            captions.append(text)
            image_ids.append(f"demo-{i:05d}")
            img.append(v)
            txt.append(_jitter(norm * space.text(scene, words, r_pairs, TEXT_NOISE, MODALITY_GAP), r_pairs))
    taken = set(scenes)
    senteval = tmp / "senteval"
    _write_senteval(senteval, r_sts, cfg["n_dev"], cfg["n_test"], taken)
    lines: dict[str, None] = {}
    for _ in range(50 * cfg["n_text"]):
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
    n_scenes: int = 400,
    captions_per_scene: int = 2,
    n_text: int = 2000,
    dim: int = 384,
    n_dev: int = 200,
    n_test: int = 100,
    feature_norm: float = 1.25,
    family: int = 12,
    image_noise: float = 0.35,
) -> DemoCorpus:
    """Generate (or reuse from ``cache_dir``) the demo corpus; returns its paths.

    ``n_scenes`` images in families of ``family`` (near-duplicates), ``captions_per_scene``
    captions each; ``n_text`` text lines; STS-B dev ``n_dev`` pairs and ``n_test`` pairs per test
    task; features ``dim``-d at norm about ``feature_norm``, the image's own noise
    ``image_noise`` (visual detail no caption names). The corpus lives in
    ``cache_dir/demo-v<VERSION>-<hash of the settings>``; a folder whose manifest matches is
    reused as is. Generation writes to a temporary folder and renames it.
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
    if family < 1:
        raise ValueError(f"family={family}: a family holds at least one image")
    cfg = dict(version=VERSION, seed=int(seed), n_scenes=n_scenes, captions_per_scene=captions_per_scene,
               n_text=n_text, dim=dim, n_dev=n_dev, n_test=n_test, feature_norm=float(feature_norm),
               family=int(family), image_noise=float(image_noise))
    digest = hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:10]
    cache = Path(cache_dir)
    root = cache / f"demo-v{VERSION}-{digest}"
    corpus = DemoCorpus(
        root, root / "text.txt", root / "pairs.parquet", root / "senteval", root / "manifest.json"
    )
    if _valid(corpus, cfg):
        return corpus
    with building(root) as built:  # a refused command removes it again (runtime/created.py)
        cache.mkdir(parents=True, exist_ok=True)
        with file_lock(cache / f".{root.name}.lock"):  # one builder; the others wait, then reuse
            if not _valid(corpus, cfg):
                _build_into(root, cfg, cache, corpus)
                built[0] = True
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
