"""The method API: what an objective declares so that mmemb can train, check and log it, and where
methods come from. docs/methods.md walks through writing one; this module is the reference.

A method is a subclass of :class:`Method`, registered with ``@register``:

- ``name`` (what ``objective.method`` names) and ``settings``, a frozen dataclass subclassing
  :class:`Settings` whose every field is ``trainables.runtime.checks.setting(default, check)``; the
  defaults are the method's own values (the official code's, for the built-in methods). Its
  fields are the grid keys and search dimensions ``objective.<field>``, its values the run's
  MLflow params, and they alone (with the method's name) enter the config hash.
- ``needs(s)``: what a batch must carry (:class:`Needs`), so the data loader, the trainer and
  the pre-start checks load and check only that.
- ``heads(s, dims)``: the small trainable modules it puts on the student (:class:`Head`), built
  once per array member from that member's seed.
- ``text_loss(s, out)`` and ``caption_loss(s, out, teacher, generator=...)``: pure tensor
  functions returning every named term and ``"total"`` for a text batch and for a caption batch.
  Every term is logged as a metric history (``loss/<name>``).
- optional: ``validate(s)`` (checks across several settings), ``describe(s)`` (the settings the
  loss really uses, for a model card and MLflow), ``negative_filter(s)`` (a false-negative filter
  on stored CLIP scores), ``check_data(s, store)`` (refusals that depend on the feature store),
  ``recipes`` (what the method sets on the demo or paper profile), ``defaults_from``.

Where methods come from: the built-ins (``simcse``, ``mcse``, ``kdmcse``, ``dalr``: one module each
in this package), a user's ``.py`` file or module (:func:`load_methods`, ``--methods``, or a grid
file that imports it), and installed packages that name a module in the entry-point group
``mmemb.methods``. The registry remembers where each method came from, so a process that never
imported it (a Ray Train worker) loads it from there (:func:`ensure_methods`); settings pickle
the same way.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from trainables.objectives.core import angular_margin_logits, diagonal_cross_entropy
from trainables.runtime import shipping
from trainables.runtime.checks import Number, check_fields, leaf_fields
from trainables.runtime.user_code import ImportExited, importing

DEFAULT_METHOD = "mcse"
"""what ``objective.method`` is when nothing names it (MCSE, the papers' common baseline)"""
ENTRY_POINTS = "mmemb.methods"
"""entry-point group under which an installed package names its method modules"""
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
ANGLE = Number(0, math.pi, hi_open=True, hint="an angle in radians; official 0.15 / 0.18")
"""the check of an angular margin setting"""


# ------------------------------------------------------------------------------ what flows in
@dataclass
class StudentOutputs:
    """What the student produces for one batch (bs rows, two dropout views).

    Fields a batch kind does not need are None (text batches carry z1, z2, cls1, cls2, the mask
    and the outputs of heads declared for every batch).
    """

    z1: torch.Tensor
    """(bs, d) MLP output, view 1"""
    z2: torch.Tensor
    """(bs, d) MLP output, view 2"""
    cls1: torch.Tensor | None = None
    """(bs, d) [CLS] before the MLP, view 1 (l_pool; the evaluation embedding)"""
    cls2: torch.Tensor | None = None
    p1: torch.Tensor | None = None
    """(bs, g) grounding head on cls1, L2-normalised"""
    p2: torch.Tensor | None = None
    v: torch.Tensor | None = None
    """(bs, g) image head on the image feature, L2-normalised"""
    t: torch.Tensor | None = None
    """(bs, g) CLIP-text head on the CLIP caption feature, L2-normalised"""
    text_aligned: torch.Tensor | None = None
    """(bs, 256) DALR text_aligner(z1)"""
    image_aligned: torch.Tensor | None = None
    """(bs, 256) DALR image_aligner(raw clip image feature)"""
    attention_mask: torch.Tensor | None = None
    """(bs, L) student attention mask"""
    extra: dict[str, torch.Tensor] | None = None
    """outputs of heads declared without ``into``, by head name: (bs, 2, d) for a two-view input
    ('cls', 'z'), else (bs, d)"""


@dataclass
class TeacherInputs:
    """Frozen teacher quantities for a caption+image batch (no gradients)."""

    image: torch.Tensor
    """(bs, Dv) stored image feature as stored (CLIP image, unnormalised; or ResNet)"""
    clip_text: torch.Tensor | None = None
    """(bs, Dt) stored CLIP text feature of the caption, unnormalised"""
    text_teachers: tuple[torch.Tensor, ...] = ()
    """one (bs, d) [CLS] embedding per text teacher, in the run's ``text_teachers`` order"""
    text_teacher_local: tuple[torch.Tensor, ...] = ()
    """one (bs, L-1, d) token-state tensor per text teacher (only with ``Needs.teacher_tokens``)"""


def need(obj: object, term: str, *fields: str) -> list[torch.Tensor]:
    """``obj``'s ``fields``, or one line naming the term that needs the missing ones."""
    missing = [f for f in fields if getattr(obj, f) is None]
    if missing:
        raise ValueError(
            f"{term} needs {type(obj).__name__}.{', '.join(missing)}; compute it or switch the term off"
        )
    return [getattr(obj, f) for f in fields]


# ------------------------------------------------------------------------------ declarations
@dataclass(frozen=True)
class Settings:
    """Base of every method's settings: subclass it as a frozen dataclass whose every field is
    ``setting(default, check)``. ``method`` (the registered name) is not a field: the registry
    knows which method a settings class belongs to."""

    @property
    def method(self) -> str:
        return method_name(type(self))

    @property
    def is_resolved(self) -> bool:
        """Always: settings hold the method's values themselves (no None-means-default)."""
        return True

    def resolved(self) -> Settings:
        """These settings, checked (each field's check, then the method's ``validate``)."""
        check_settings(self)
        return self

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings the loss really uses (``Method.describe``), for a model card or MLflow."""
        return get(self.method).describe(self)

    def __reduce__(self):
        # By name and source, not by class: a process that never imported the method (a Tune
        # trial unpickling its plan) loads it from where the driver found it.
        name = self.method
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return (_rebuild, (name, _SOURCES.get(name), values))


@dataclass(frozen=True)
class Needs:
    """What a method's loss reads from a batch beyond the student's two views and [CLS] (always
    there). The data loader opens the feature store only for ``captions``; the trainer runs the
    text teachers only for ``text_teachers`` (their token states only for ``teacher_tokens``);
    the pre-start checks refuse a store or run that lacks what is declared."""

    captions: bool = True
    """trains on caption batches from the feature store; False: text batches only (SimCSE)"""
    image: bool = True
    """the stored image feature (``data.image_column``) of each caption"""
    clip_text: bool = False
    """the stored CLIP caption feature feeds a term (heads then get ``HeadDims.clip_text_dim``)"""
    text_teachers: bool = False
    """the run's frozen text teachers (``text_teachers``): one [CLS] embedding each per caption"""
    teacher_tokens: bool = False
    """their token states as well (a teacher forward per caption batch, not stored columns)"""
    teacher_weights: tuple[float, ...] | None = None
    """the method's weight per text teacher, when it weighs them: one per ``text_teachers``"""
    permutations: int = 0
    """row permutations the caption loss draws from its ``generator`` per caption batch (DALR's
    ListMLE tie-break: 1), through ``trainables.objectives.core.row_permutation``: an array
    draws them ahead, from each member's own stream, so that the members of a method can run as
    one batched computation"""

    def __post_init__(self) -> None:
        if (self.image or self.clip_text or self.text_teachers) and not self.captions:
            raise ValueError("Needs: image, clip_text and text_teachers come with caption "
                             "batches; set captions=True")
        if self.teacher_tokens and not self.text_teachers:
            raise ValueError("Needs: teacher_tokens are the text teachers' token states; set "
                             "text_teachers=True")


@dataclass(frozen=True)
class HeadDims:
    """The sizes a method's heads can be built from."""

    hidden: int
    """the student's hidden size ([CLS], z)"""
    proj_dim: int
    """``proj_dim`` of the run (the grounding space, 256 in the official code)"""
    image_dim: int | None
    """the stored image feature's size (None: no feature store)"""
    clip_text_dim: int | None
    """the stored CLIP caption feature's size, when ``Needs.clip_text`` (else None)"""


HEAD_INPUTS = ("cls", "z", "z1", "image", "clip_text")
TWO_VIEWS = ("cls", "z")
HEAD_KINDS = ("tanh", "linear", "aligner")
HEAD_FIELDS = ("p1", "p2", "v", "t", "text_aligned", "image_aligned")
"""StudentOutputs fields a head may fill (``Head.into``)"""


@dataclass(frozen=True)
class Head:
    """A small trainable module on one input of the student's batch; each array member gets its
    own, initialised from its seed, optimised and checkpointed with it.

    Kinds (``trainables.models.heads``): 'tanh' = Linear + tanh (MCSE's MLPLayer), 'linear' = Linear,
    'aligner' = DALR's Linear-BN-ReLU-Linear-BN-ReLU with hidden width ``width``. Inputs: 'cls' and
    'z' ([CLS] before / after the SimCSE MLP, both dropout views: (bs, 2, d)), 'z1' (view 1 after
    the MLP), 'image' and 'clip_text' (the stored features, caption batches only).
    """

    input: str
    out_dim: int
    kind: str = "tanh"
    normalize: bool = True
    """L2-normalise the output (the grounding heads are)"""
    into: tuple[str, ...] = ()
    """StudentOutputs fields to fill: two for a two-view input ('p1', 'p2'), one otherwise;
    empty: ``StudentOutputs.extra[<head name>]``"""
    in_dim: int | None = None
    """input size; None: the input's own (``HeadDims``)"""
    width: int | None = None
    """an aligner's hidden width; None: its input size"""
    batches: str = "caption"
    """'caption': caption batches only; 'all': text batches too ('cls', 'z', 'z1' inputs)"""


@dataclass(frozen=True)
class NegativeFilter:
    """A false-negative filter on stored CLIP scores (KDMCSE's threshold): in-batch negatives
    whose clip_text . image score (``on``: 'dot' products or 'cosine's) exceeds ``threshold``
    leave the softmax. Declaring it lets mmemb sample it on the store before the start, log its
    share per caption batch (``filter/masked_fraction``) and stop a member it blinds."""

    threshold: float
    on: str = "dot"
    setting: str = "objective.threshold"
    """the setting that holds ``threshold`` (named in refusals)"""
    on_setting: str = "objective.threshold_on"


class StoreView:
    """What ``Method.check_data`` sees of a run's feature store and student."""

    def __init__(self, path: str, image_column: str, image_dim: int | None,
                 clip_text_dim: int | None, columns: tuple[str, ...],
                 hidden: Callable[[], int]):
        self.path, self.image_column = path, image_column
        self.image_dim, self.clip_text_dim, self.columns = image_dim, clip_text_dim, columns
        self._hidden, self._hidden_value = hidden, None

    @property
    def hidden(self) -> int:
        """The student's hidden size (reads the encoder's config the first time)."""
        if self._hidden_value is None:
            self._hidden_value = self._hidden()
        return self._hidden_value


class Method:
    """One objective: its settings, needs, heads and losses (module docstring). Subclass it and
    decorate the class with ``@register``."""

    name: ClassVar[str] = ""
    settings: ClassVar[type[Settings]]
    defaults_from: ClassVar[str | None] = None
    """where the settings' defaults come from, as ``--dry-run --explain`` names them (None: the
    settings class)"""
    recipes: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    """profile kind ('demo' or 'paper') -> overrides the method sets there (e.g. the demo lam)"""

    def needs(self, s: Settings) -> Needs:
        return Needs()

    def heads(self, s: Settings, dims: HeadDims) -> Mapping[str, Head]:
        return {}

    def text_loss(self, s: Settings, out: StudentOutputs) -> dict[str, torch.Tensor]:
        """A text batch: SimCSE's InfoNCE of z1 against z2, with ``s.temperature`` (default 0.05)
        and, when the settings have one, the fixed angular margin ``s.text_margin``."""
        text = text_infonce(out, getattr(s, "temperature", 0.05), getattr(s, "text_margin", 0.0))
        return {"text": text, "total": text}

    def caption_loss(self, s: Settings, out: StudentOutputs, teacher: TeacherInputs, *,
                     generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """A caption batch: every named term and "total". ``generator`` seeds any randomness of
        the loss (the member's own stream)."""
        raise NotImplementedError(f"method {self.name!r} trains on caption batches but defines "
                                  "no caption_loss")

    def validate(self, s: Settings) -> None:
        """Checks across several settings; raise ValueError with one line."""

    def describe(self, s: Settings) -> dict[str, Any]:
        """The settings the loss really uses; default: all of them."""
        return {"method": self.name, **{f.name: getattr(s, f.name) for f in dataclasses.fields(s)}}

    def negative_filter(self, s: Settings) -> NegativeFilter | None:
        return None

    def check_data(self, s: Settings, store: StoreView) -> None:
        """Refuse, in one line, a feature store the loss cannot use (before any model is built)."""


def text_infonce(out: StudentOutputs, temperature: float, margin: float = 0.0) -> torch.Tensor:
    """SimCSE's InfoNCE of z1 -> z2 (with KDMCSE's fixed angular margin when ``margin`` > 0)."""
    return diagonal_cross_entropy(angular_margin_logits(out.z1, out.z2, temperature, margin))


# ------------------------------------------------------------------------------ the registry
_METHODS: dict[str, Method] = {}
_SOURCES: dict[str, tuple[str, str | None]] = {}
"""name -> (module, file) it was defined in"""
_BY_SETTINGS: dict[type, str] = {}


def register(method: type[Method] | Method) -> Any:
    """Class decorator (or call on an instance): make the method known by its name.

    Refuses, in one line, what would fail later: a bad name, settings that are not a frozen
    dataclass subclassing Settings, a field without a default or a check, defaults that fail
    their own checks. Registering the same class again (its file re-read) replaces it; another
    definition under a taken name is refused.
    """
    m = method() if isinstance(method, type) else method
    cls = type(m)
    where = f"method {getattr(m, 'name', '')!r} ({cls.__module__}.{cls.__qualname__})"
    name = m.name
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{where}: name must be lower-case letters, digits and _ starting with a "
                         "letter (it is objective.method)")
    st = getattr(m, "settings", None)
    if not (isinstance(st, type) and issubclass(st, Settings) and "__dataclass_fields__" in vars(st)
            and st.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise ValueError(f"{where}: settings must be a @dataclass(frozen=True) subclass of "
                         "trainables.objectives.methods.Settings")
    try:
        leaf_fields(st)
    except TypeError as e:
        raise ValueError(f"{where}: {e}") from None
    for f in dataclasses.fields(st):
        if f.name == "method":
            raise ValueError(f"{where}: 'method' is objective.method itself; rename that setting")
        if f.default is MISSING and f.default_factory is MISSING:
            raise ValueError(f"{where}: setting {f.name!r} needs a default (the method's value)")
    source = (cls.__module__, _module_file(cls.__module__))
    if source[1] is not None and not is_builtin_module(source[0]):
        shipping.add_code(source[0], source[1])  # a user's method: its folder goes to the workers
    old = _METHODS.get(name)
    if old is not None and (type(old).__module__, type(old).__qualname__) != (
            cls.__module__, cls.__qualname__):
        raise ValueError(f"method {name!r} is defined twice: in {_describe_source(_SOURCES[name])} "
                         f"and in {_describe_source(source)}; rename one")
    owner = _BY_SETTINGS.get(st)
    if owner is not None and owner != name:
        raise ValueError(f"{where}: settings {st.__name__} already belong to method {owner!r}; "
                         "give each method its own settings class")
    old_source = _SOURCES.get(name)
    _METHODS[name], _SOURCES[name], _BY_SETTINGS[st] = m, source, name
    try:
        check_settings(st())
        m.needs(st())
    except (ValueError, TypeError) as e:
        del _METHODS[name], _SOURCES[name], _BY_SETTINGS[st]
        if old is not None:
            _METHODS[name], _SOURCES[name] = old, old_source
        raise ValueError(f"{where}: its default settings fail: {e}") from None
    return method


def _module_file(module: str) -> str | None:
    f = getattr(sys.modules.get(module), "__file__", None)
    return str(Path(f).resolve()) if f else None


def _describe_source(source: tuple[str, str | None]) -> str:
    return source[1] or source[0]


def get(name: str) -> Method:
    """The registered method ``name``; one line listing the known ones otherwise."""
    m = _METHODS.get(name) if isinstance(name, str) else None
    if m is None and isinstance(name, str):
        _load_entry_points()
        m = _METHODS.get(name)
    if m is None:
        raise ValueError(f"objective.method={name!r} is not a known method; known: "
                         f"{', '.join(names())} (yours: --methods FILE.py, docs/methods.md)")
    return m


def names() -> list[str]:
    """Every registered method (installed packages' entry points included), sorted."""
    _load_entry_points()
    return sorted(_METHODS)


def builtin_names() -> tuple[str, ...]:
    """The methods that ship with mmemb, sorted."""
    return tuple(sorted(n for n, (mod, _) in _SOURCES.items() if is_builtin_module(mod)))


def is_builtin_module(module: str) -> bool:
    return module.startswith(__name__.rsplit(".", 1)[0] + ".")


def method_name(settings_cls: type) -> str:
    name = _BY_SETTINGS.get(settings_cls)
    if name is None:
        raise ValueError(f"{settings_cls.__name__} belongs to no registered method; decorate "
                         "the Method that names it with @register")
    return name


def method_of(s: Settings) -> Method:
    return get(s.method)


def default_label(name: str) -> str:
    """How ``--dry-run --explain`` names a value that comes from the method's settings defaults."""
    m = get(name)
    return f"method default ({m.defaults_from or m.settings.__name__})"


def setting_names(name: str) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(get(name).settings))


def check_settings(s: Settings) -> None:
    """Each field's check (``objective.<field>`` named), then the method's ``validate``."""
    check_fields(s, "objective.")
    method_of(s).validate(s)


def source(name: str) -> tuple[str, str | None]:
    """(module, file) the method ``name`` was defined in."""
    get(name)
    return _SOURCES[name]


def sources(methods: Iterable[str]) -> dict[str, tuple[str, str | None]]:
    """Where each of ``methods`` not shipped with mmemb came from: what a fresh process needs to
    load them (:func:`ensure_methods`)."""
    out = {}
    for n in methods:
        get(n)
        if not is_builtin_module(_SOURCES[n][0]):
            out[n] = _SOURCES[n]
    return out


def ensure_methods(wanted: Mapping[str, Any]) -> None:
    """Load every method of ``wanted`` (name -> (module, file), as :func:`sources` gives) that
    this process does not know yet."""
    for name, source in wanted.items():
        if name in _METHODS:
            continue
        module, file = source
        _load_source(module, file)
        if name not in _METHODS:
            raise ValueError(f"{_describe_source((module, file))} was loaded but registers no "
                             f"method {name!r}")


def load_methods(items: Iterable[str]) -> list[str]:
    """Load each item, a ``.py`` file or an importable module name, and return the methods it
    registered (or had registered already). ``--methods`` calls this."""
    out: list[str] = []
    for item in items:
        before = {n: _SOURCES[n] for n in _METHODS}
        path = Path(item).expanduser()
        if item.endswith(".py") or path.exists():
            if not path.is_file():
                raise ValueError(f"--methods {item}: no such file; pass a .py file that "
                                 "registers a method, or an importable module")
            file = str(path.resolve())
            # as a worker will: its folder first on the import path (and shipped to the workers)
            mod = _import_user(path.stem, file, shipping.add(path.resolve().parent))
        else:
            file = None
            try:
                with importing(item, "method module"):  # code: it may exit or be interrupted
                    mod = importlib.import_module(item)
            except ImportError as e:
                raise ValueError(f"--methods {item}: cannot import it ({e}); install its package "
                                 "or pass a .py file") from None
        found = [n for n, (m, _) in _SOURCES.items() if m == mod.__name__]
        new = [n for n in _METHODS if n not in before]
        if not found and not new:
            raise ValueError(f"{file or item} registers no method; decorate your Method subclass "
                             "with @register (docs/methods.md)")
        out += [n for n in dict.fromkeys(found + new) if n not in out]
    return out


def _load_source(module: str, file: str | None) -> None:
    """Import ``module`` from where the driver found it: the worker's copy of the folder Ray
    shipped (``trainables.runtime.shipping``), else the same file on the import path (an
    installed package), else the file's folder where this machine has it."""
    if module in sys.modules:
        return
    if file is not None:
        root = shipping.root_of(module, file)
        copy = shipping.locate(root)
        if copy is not None and copy != root:  # shipped by Ray: the driver's version
            _import_user(module, str(copy / Path(file).relative_to(root)), copy)
            return
    spec = None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    same = spec is not None and (file is None or (spec.origin and Path(spec.origin).resolve()
                                                  == Path(file)))
    if same or file is None:
        try:
            with importing(module, "method module"):  # code: it may exit or be interrupted
                importlib.import_module(module)
        except ImportError as e:
            raise ValueError(f"method module {module!r} cannot be imported here ({e}); install "
                             "its package on every node") from None
        return
    if not Path(file).is_file():
        raise ValueError(f"method file {file} was not shipped to this worker and does not exist "
                         "on this machine; give it to the command (--methods, or import it from "
                         "your grid file) so Ray ships its folder, or install it as a package")
    _import_user(module, file, shipping.root_of(module, file))


def _import_user(module: str, file: str, root: Path) -> Any:
    """Import ``module`` (the user's ``file``) with ``root`` first on the import path, as every
    process of the run does, so it may import modules beside it; a broken file is one line."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        have = getattr(loaded, "__file__", None)
        if have and Path(have).resolve() == Path(file).resolve():
            return loaded
        raise ValueError(f"{file}: a module named {module!r} is already loaded from {have}; "
                         "rename your file")
    shipping.put_first(root)
    importlib.invalidate_caches()  # a file written since this process last looked there
    with importing(file, "method file"):  # code: sys.exit, argparse, Ctrl-C named as such
        try:
            mod = importlib.import_module(module)
        except Exception as e:
            raise ValueError(f"{file}: {type(e).__name__}: {e}; fix that file") from None
    got = getattr(mod, "__file__", None)
    if not got or Path(got).resolve() != Path(file).resolve():
        sys.modules.pop(module, None)
        raise ValueError(f"{file}: `import {module}` loads {got} instead; rename your file")
    return mod


_EP_SEEN: set[str] = set()


def _load_entry_points() -> None:
    """Import the modules installed packages name in the ``mmemb.methods`` group (once each)."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        key = f"{ep.name}={ep.value}"
        if key in _EP_SEEN:
            continue
        _EP_SEEN.add(key)
        try:
            with importing(f"entry point {ep.name} = {ep.value} ({ENTRY_POINTS})", "method package"):
                obj = ep.load()
        except ImportExited:
            raise
        except Exception as e:
            raise ValueError(f"entry point {ep.name} = {ep.value} ({ENTRY_POINTS}): "
                             f"{type(e).__name__}: {e}; fix or uninstall that package") from None
        if isinstance(obj, type) and issubclass(obj, Method) and obj.name not in _METHODS:
            register(obj)


def _rebuild(name: str, source: tuple[str, str | None] | None, values: dict[str, Any]) -> Settings:
    if name not in _METHODS and source is not None:
        ensure_methods({name: source})
    return get(name).settings(**values)


# ------------------------------------------------------------------------------ heads
def resolve_heads(heads: Mapping[str, Head], dims: HeadDims,
                  reserved: Iterable[str] = ()) -> tuple[tuple[str, Head], ...]:
    """The declared heads with their input sizes filled in, checked; one line per problem."""
    out = []
    taken = set(reserved)
    for name, h in heads.items():
        where = f"head {name!r}"
        if not isinstance(name, str) or not _NAME.match(name) or name in taken:
            raise ValueError(f"{where}: name must be lower-case letters, digits and _ and not one "
                             f"of {sorted(taken)}")
        if not isinstance(h, Head):
            raise ValueError(f"{where}: declare it as trainables.objectives.methods.Head(...)")
        if h.input not in HEAD_INPUTS or h.kind not in HEAD_KINDS:
            raise ValueError(f"{where}: input must be one of {HEAD_INPUTS} and kind one of "
                             f"{HEAD_KINDS}, got {h.input!r}, {h.kind!r}")
        if h.batches not in ("caption", "all"):
            raise ValueError(f"{where}: batches must be 'caption' or 'all', got {h.batches!r}")
        if h.batches == "all" and h.input in ("image", "clip_text"):
            raise ValueError(f"{where}: the {h.input} feature comes with caption batches only; "
                             "set batches='caption'")
        want = 2 if h.input in TWO_VIEWS else 1
        if h.into and (len(h.into) != want or any(f not in HEAD_FIELDS for f in h.into)):
            raise ValueError(f"{where}: into must name {want} of {HEAD_FIELDS} for input "
                             f"{h.input!r} (or be empty: StudentOutputs.extra), got {h.into}")
        in_dim = h.in_dim or {"cls": dims.hidden, "z": dims.hidden, "z1": dims.hidden,
                              "image": dims.image_dim, "clip_text": dims.clip_text_dim}[h.input]
        if in_dim is None:
            raise ValueError(f"{where} reads the {h.input} feature but the run has none (no "
                             "feature store, or Needs does not declare it)")
        for what, v in (("out_dim", h.out_dim), ("in_dim", in_dim), ("width", h.width or 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{where}: {what}={v!r} must be a positive integer")
        out.append((name, dataclasses.replace(h, in_dim=in_dim, width=h.width or in_dim,
                                              into=tuple(h.into))))
        taken.add(name)
    return tuple(out)
