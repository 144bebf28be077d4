"""The run config: everything one training run depends on, frozen, hashable, overridable by dotted keys.

A grid row, a search trial and a command line all produce a `RunConfig` by applying overrides
(``{"objective.threshold": 0.8, "lr": 2e-5}``) to a base; the config hash then names the run, so
two runs with the same hash are the same experiment (the seed is part of the config).

``objective`` holds the settings of the run's method (``trainables.objectives.methods``): which
class, and so which ``objective.*`` keys exist, is decided by ``objective.method``, applied before
the other keys whatever their order. The hash covers the method's name and its own settings only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainables.objectives.methods import DEFAULT_METHOD, Needs, Settings, get, method_of, names
from trainables.runtime.checks import (
    NON_NEGATIVE,
    POSITIVE,
    SEED,
    Choice,
    Each,
    Flag,
    Nested,
    Optional,
    Text,
    check_fields,
    count,
    setting,
)


@dataclass(frozen=True)
class DataConfig:
    """Where the training and evaluation data live. ``demo=True`` generates the demo corpus."""

    demo: bool = setting(False, Flag())
    """use the generated demo corpus (trainables.data.demo_corpus) instead of the paths below"""
    text: str | None = setting(None, Optional(Text()))
    """Wiki1M-style text file, one sentence per line (None: no text batches, caption-only)"""
    caption_only: bool = setting(False, Flag())
    """train on the caption+image pairs alone, no text batches (MCSE's flickr-only setting);
    the demo corpus honours it too"""
    pairs: str | None = setting(None, Optional(Text()))
    """Parquet feature store of (caption, image) pairs (trainables.data.store); None: text-only SimCSE"""
    senteval: str | None = setting(None, Optional(Text()))
    """SentEval 'downstream' folder (STS/, SICK/) for dev and test evaluation"""
    image_column: str = setting("image", Text())
    """store column used as the image feature ('image' = CLIP image, 'resnet' = MCSE ResNet-50)"""
    demo_seed: int = setting(0, SEED)
    """seed of the generated demo corpus (fixed across runs so seeds vary training only)"""
    demo_dim: int = setting(384, count(2))
    """teacher feature size of the demo corpus; DALR's CMA needs it equal to the student's
    hidden size (384 for MiniLM-L6), as CLIP ViT-L/14's 768 equals BERT-base's"""
    cache_dir: str = setting(".cache/mmemb", Text())
    """where the demo corpus and tokenised caches are written"""
    shuffle_images: bool = setting(False, Flag())
    """control: pair each caption with the image feature of another image (a fixed permutation of
    the image ids); the CLIP caption feature stays with its caption. Grounding then carries no
    information about the caption, so a gain that survives it does not come from the images"""


@dataclass(frozen=True)
class RunConfig:
    """One training run. Defaults are the official MCSE recipe (BERT-base, wiki+flickr)."""

    objective: Settings = setting(check=Nested(), factory=lambda: get(DEFAULT_METHOD).settings())
    """the method's settings: its weights, margins, temperatures and switches (``objective.method``
    picks the method; trainables.objectives)"""
    data: DataConfig = setting(check=Nested(), factory=DataConfig)
    encoder: str = setting("bert-base-uncased", Text())
    """student encoder: hub name or local folder (BERT or RoBERTa)"""
    text_teachers: tuple[str, ...] = setting((), Each(Text(), nonempty=False))
    """frozen text teachers (hub names or folders) of methods that use them (DALR; its weights
    are objective.teacher_weights)"""
    lr: float = setting(3e-5, POSITIVE)
    batch_size: int = setting(64, count(2, "in-batch negatives need 2 rows"))
    epochs: int = setting(3, count(1))
    max_steps: int | None = setting(None, Optional(count(1)))
    """stop after this many optimiser steps (None: the full schedule); the LR decays over it"""
    max_length: int = setting(32, count(3, "[CLS], a token and [SEP]"))
    """training tokenisation length (official: 32)"""
    eval_every: int = setting(125, count(1))
    """STS-B dev evaluation (and checkpoint) every N optimiser steps, and at the last step"""
    seed: int = setting(0, SEED)
    schedule: str = setting("official", Choice(("official", "proportional")))
    """batch alternation: 'official' (every k-th step a pair batch) or 'proportional' (MCSE paper)"""
    precision: str = setting("fp32", Choice(("fp32", "bf16", "auto")))
    """'fp32' (the official runs': fp32 weights and activations, TF32 matmuls on a GPU that has
    them, as torch 1.7-1.11 allowed by default), 'bf16' (bf16 autocast: faster, not the official
    arithmetic; bench/README.md "precision.py" says what it changes) or 'auto' (bf16 on CUDA,
    fp32 on CPU)"""
    compile: str = setting("off", Choice(("off", "default", "graphs")))
    """how an array's step runs: 'off' (eager), 'default' (the stacked encoder's forward and
    backward through torch.compile), 'graphs' (the same, with CUDA graphs on CUDA:
    mode='reduce-overhead', every step's batch padded to batch_size x max_length so each step has
    one shape); how it runs, not what it computes: not in the config hash"""
    proj_dim: int = setting(256, count(1))
    adam_eps: float = setting(1e-6, POSITIVE)
    optimizer: str = setting("official", Choice(("official", "torch")))
    """'official': transformers.AdamW 4.x as the official code ran it (eps before the bias
    correction; a head a step does not reach keeps a zero gradient and moves by momentum, as under
    torch 1.7); 'torch': torch 2's AdamW (eps after it; such a head is skipped).
    trainables/arrays/optim.py, docs/official-code.md, "The loop" """
    weight_decay: float = setting(0.0, NON_NEGATIVE)
    grad_clip: float = setting(1.0, POSITIVE)
    num_workers: int = setting(1, count(1))
    """Ray Train workers (DDP); the batch is split across them"""
    use_gpu: bool | None = setting(None, Optional(Flag()))
    """None: use a GPU when the cluster has one (resources per worker are set by the launcher)"""
    eval_batch_size: int = setting(128, count(1))
    final_eval: bool = setting(True, Flag())
    """evaluate the best checkpoint on the seven STS tasks at the end"""
    transfer: str | None = setting(None, Optional(Choice(("fast", "full"))))
    """also evaluate the best checkpoint on SentEval's seven transfer tasks (MR, CR, SUBJ, MPQA,
    SST-2, TREC, MRPC; logistic-regression probes, trainables.evaluation.transfer) at the end, logged as
    transfer/<task> and transfer/avg: None (off), 'full' (the papers' protocol: SimCSE's test mode,
    10 folds, Adam) or 'fast' (its fasttest mode: 5 folds, RMSprop). The files are read from
    data.senteval; on the demo profile, whose STS data is generated, they are evaluated only when
    data.senteval names the real SentEval folder (otherwise the run logs no transfer/ metrics)"""

    # --- identity -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = _to_jsonable(dataclasses.asdict(self))
        d["objective"] = {"method": self.objective.method, **d["objective"]}
        return d

    def config_hash(self) -> str:
        """Stable 12-hex hash of every field that shapes the result (seed included).

        ``data.cache_dir`` is left out: it says where derived files live, not what they are;
        ``compile`` too: how the step runs;
        ``transfer`` is left out while off, so runs without it keep their earlier hashes.
        """
        d = self.to_dict()
        d["data"].pop("cache_dir")
        d.pop("compile")  # how the step runs (eager or captured), not what it computes
        if d["transfer"] is None:  # off: the hash every run had before the setting existed
            d.pop("transfer")
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        return RunConfig().with_overrides(flatten(d))

    def resolved(self) -> RunConfig:
        """This config, its objective settings checked (they hold the method's values already;
        kept for scripts written when they did not)."""
        self.objective.resolved()
        return self

    # --- overrides ------------------------------------------------------------------------
    def with_overrides(self, overrides: Mapping[str, Any]) -> RunConfig:
        """Apply ``{"a.b": value}`` overrides; unknown keys and wrong types raise one clear line.

        ``objective.method`` goes first: another method starts from its own settings' defaults,
        and the other ``objective.*`` keys must be settings of that method."""
        flat = flatten(overrides)
        cfg: Any = self
        if "objective.method" in flat:
            cfg = dataclasses.replace(cfg, objective=switch_method(cfg.objective, flat["objective.method"]))
        for key, value in flat.items():
            if key != "objective.method":
                cfg = _set(cfg, key.split("."), value, key)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Each setting's own check (``trainables.runtime.checks``), then what depends on several."""
        def bad(msg: str) -> None:
            raise ValueError(f"invalid run config: {msg}")

        try:
            check_fields(self)
        except ValueError as e:
            bad(str(e))
        if self.num_workers < 1 or self.batch_size % self.num_workers:
            bad(f"batch_size={self.batch_size} must split evenly over num_workers={self.num_workers}")
        if self.transfer is not None and not self.final_eval:
            bad(f"transfer={self.transfer!r} is part of the final evaluation: set final_eval=true "
                "or transfer=null")
        method = self.objective.method
        needs = self.needs
        if needs.captions and not self.data.demo and self.data.pairs is None:
            bad(f"method {method!r} needs caption+image pairs: set data.pairs=STORE.parquet")
        if needs.text_teachers and not self.text_teachers and not self.data.demo:
            bad(f"method {method!r} needs text teachers: set text_teachers=[path, ...]")
        try:
            self.objective.resolved()  # the method's checks across several settings
        except ValueError as e:
            bad(str(e))

    @property
    def needs(self) -> Needs:
        """What the run's method reads from a batch (``trainables.objectives.methods.Needs``)."""
        return method_of(self.objective).needs(self.objective)


def switch_method(current: Settings, name: Any) -> Settings:
    """``current`` if it is already ``name``'s settings, else that method's defaults."""
    if not isinstance(name, str):
        raise ValueError(f"objective.method={name!r} must be one of {', '.join(map(repr, names()))}")
    if isinstance(current, Settings) and current.method == name:
        return current
    return get(name).settings()


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"objective": {"lam": 0.1}}`` -> ``{"objective.lam": 0.1}`` (nested dataclass fields only)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and k in ("objective", "data"):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def load_yaml(path: str | Path, reserved: tuple[str, ...] = ()) -> dict[str, Any]:
    """Read a YAML file of (nested or dotted) overrides; a clear error when it is not a mapping.
    ``reserved`` top-level keys are not settings (a profile's ``base``): returned unchecked."""
    import yaml

    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f"config file {path} is a folder; pass the YAML file inside it")
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist; pass an existing YAML file")
    try:
        data = yaml.load(path.read_text(), Loader=_loader()) or {}
    except _Twice as e:
        raise ValueError(f"config file {path}: {e}; YAML would keep only the last one, silently: "
                         "keep one of them in that file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or e.__class__.__name__
        raise ValueError(f"config file {path} is not valid YAML{where} ({what}); fix its syntax "
                         "there") from None
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of settings, not {type(data).__name__}")
    kept = {k: data.pop(k) for k in reserved if k in data}
    _check_spelled_once(data, path)
    flat = flatten(data)
    for key, value in flat.items():  # a misspelled key or a bad value: say which file
        try:
            check_key(str(key), value)
        except ValueError as e:
            raise ValueError(f"config file {path}: {e}; fix it in that file") from None
    return flat | kept


class _Twice(ValueError):
    """A key given twice in one mapping of a YAML file."""


def _unique_keys() -> type:
    """A safe YAML loader that refuses a key given twice in one mapping (``lr: 1e-4`` ... ``lr:
    3e-5``): PyYAML keeps the last silently, so the file would not say what it seems to."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<": YAML's own merge of a mapping
                continue
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in lines:
                raise _Twice(f"{key!r} is given twice (lines {lines[key]} and {line})")
            lines[key] = line
        return loader.construct_mapping(node, deep=deep)

    UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return UniqueKeys


class _LazyLoader:
    """Built on first use: importing this module does not import PyYAML."""

    loader: type | None = None


def _loader() -> type:
    if _LazyLoader.loader is None:
        _LazyLoader.loader = _unique_keys()
    return _LazyLoader.loader


def _check_spelled_once(data: Mapping[str, Any], path: Path, parts: tuple[str, ...] = (),
                        seen: dict[str, str] | None = None) -> None:
    """A setting named twice in two spellings (``data.demo: true`` and ``data: {demo: false}``)
    would keep whichever ``flatten`` met last: refuse it as a key given twice."""
    seen = {} if seen is None else seen
    for k, v in data.items():
        here = (*parts, str(k))
        if isinstance(v, Mapping) and v:
            _check_spelled_once(v, path, here, seen)
            continue
        key = ".".join(here)
        spelled = here[0] + "".join(f": {{{p}" for p in here[1:]) + "}" * (len(here) - 1)
        if key in seen:
            raise ValueError(f"config file {path}: {key!r} is given twice (as {seen[key]} and as "
                             f"{spelled}); only one would be kept, silently: keep one of them in "
                             "that file")
        seen[key] = spelled


def check_key(key: str, value: Any) -> None:
    """A setting any method could take (a profile serves every method): its key exists (an
    ``objective.*`` key in some method's settings) and its value has the right type."""
    base = RunConfig()
    parts = key.split(".")
    if parts[0] == "objective" and len(parts) == 2:
        if parts[1] == "method":
            switch_method(base.objective, value)
            return
        owners = [n for n in names() if parts[1] in {f.name for f in dataclasses.fields(get(n).settings)}]
        if not owners:
            known = sorted({f.name for n in names() for f in dataclasses.fields(get(n).settings)})
            raise ValueError(f"unknown setting {key!r}: no method has it; the methods' settings: "
                             f"{', '.join(known)}")
        base = dataclasses.replace(base, objective=get(owners[0]).settings())
    check_fields(_set(base, parts, value, key))


def parse_cli_overrides(items: list[str]) -> dict[str, Any]:
    """``["lr=2e-5", "objective.threshold=none"]`` -> typed dict (YAML scalars: numbers, bools, null)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value (e.g. lr=2e-5)")
        k, v = item.split("=", 1)
        parsed = yaml.safe_load(v) if v.strip().lower() != "none" else None
        if isinstance(parsed, str):
            with contextlib.suppress(ValueError):
                parsed = float(parsed)  # YAML 1.1 leaves "2e-5" a string
        out[k.strip()] = parsed
    return out


# --- internals -------------------------------------------------------------------------------
def _to_jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _to_jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_to_jsonable(v) for v in x]
    return x


def _set(obj: Any, parts: list[str], value: Any, full: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(obj)}
    name = parts[0]
    if name not in fields:
        if isinstance(obj, Settings):
            raise ValueError(
                f"unknown setting {full!r} for method {obj.method!r}; its settings "
                f"({type(obj).__name__}): {', '.join(sorted(fields))}"
            )
        raise ValueError(
            f"unknown setting {full!r}; known at this level: {', '.join(sorted(fields))}"
        )
    if len(parts) > 1:
        child = getattr(obj, name)
        if not dataclasses.is_dataclass(child):
            raise ValueError(f"setting {full!r}: {name!r} has no sub-settings")
        return dataclasses.replace(obj, **{name: _set(child, parts[1:], value, full)})
    hints = typing.get_type_hints(type(obj))
    return dataclasses.replace(obj, **{name: _coerce(value, hints[name], full)})


def _coerce(value: Any, tp: Any, full: str) -> Any:
    """Check and gently convert a value to the field's annotated type (int->float, list->tuple)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, full)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(errors[0] if errors else f"setting {full!r} cannot be None")
    if origin is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple):
            raise ValueError(f"setting {full!r} expects a list, got {value!r}")
        (inner, *_rest) = typing.get_args(tp)
        return tuple(_coerce(v, inner, full) for v in value)
    if tp is float and isinstance(value, str):
        # YAML 1.1 reads "2e-5" (no dot) as a string; accept it as the number it means.
        with contextlib.suppress(ValueError):
            value = float(value)
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is bool and isinstance(value, bool):
        return value
    if tp is str and isinstance(value, str):
        return value
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(value, tp):  # a nested config given whole
        return value
    if dataclasses.is_dataclass(tp) and isinstance(value, Mapping):
        return _from_mapping(tp, value, full)
    if dataclasses.is_dataclass(tp):  # a group named as if it were one value
        raise ValueError(_group_given_a_value(tp, value, full))
    raise ValueError(f"setting {full!r} expects {getattr(tp, '__name__', tp)}, got {value!r}")


def _group_given_a_value(tp: Any, value: Any, full: str) -> str:
    """``objective: kdmcse`` (meant ``objective.method: kdmcse``): say what to write, not the
    name of the class behind the group."""
    if issubclass(tp, Settings):
        return (f"setting {full!r} is the method's group of settings, not one value (got "
                f"{value!r}); to choose the method write {full}.method: {value}")
    names = [f.name for f in dataclasses.fields(tp)]
    return (f"setting {full!r} is a group of settings, not one value (got {value!r}); set one "
            f"of them, as {full}.{names[0]}: ... (its settings: {', '.join(names)})")


def _from_mapping(tp: Any, value: Mapping[str, Any], full: str) -> Any:
    obj = tp()
    for k, v in value.items():
        obj = _set(obj, [k], v, f"{full}.{k}")
    return obj
