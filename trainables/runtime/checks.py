"""One declared check per setting: which values make sense, and the one-line refusal.

Every field of a config dataclass declares its check where it is defined,
``lr: float = setting(3e-5, POSITIVE)``, and :func:`check_fields` runs them all (recursing into
nested configs). Each check also lists values it must refuse (:meth:`Check.bad_values`: NaN,
infinity, zero, a negative, a wrong type), so a test can walk every field of every config type and
require a refusal for each; a field added without a check fails that test.

Checks are about one value. What depends on several (a batch that must split over the workers, a
method that needs caption pairs) stays in the config's own ``validate``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import MISSING, dataclass
from typing import Any

KEY = "check"
"""the metadata key a field's check lives under"""


class Check:
    """What a value must be. ``problem(value)`` says what is wrong (None: fine)."""

    def problem(self, value: Any) -> str | None:
        raise NotImplementedError

    def bad_values(self) -> list[Any]:
        """Values this check (or the field's type) must refuse."""
        return []


@dataclass(frozen=True)
class Number(Check):
    """A finite number (an integer if ``integer``) in [lo, hi]; ``lo_open``/``hi_open`` exclude
    the bound. ``hint`` is appended to the refusal (e.g. the official value)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    hint: str = ""

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.lo_open else '>='} {self.lo:g}")
        if self.hi is not None:
            parts.append(f"{'<' if self.hi_open else '<='} {self.hi:g}")
        return f"{kind} {' and '.join(parts)}".rstrip() + (f" ({self.hint})" if self.hint else "")

    def problem(self, value: Any) -> str | None:
        ok_type = isinstance(value, int) if self.integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type or not math.isfinite(value):
            return f"must be {self.describe()}"
        if self.lo is not None and (value < self.lo or self.lo_open and value == self.lo):
            return f"must be {self.describe()}"
        if self.hi is not None and (value > self.hi or self.hi_open and value == self.hi):
            return f"must be {self.describe()}"
        return None

    def bad_values(self) -> list[Any]:
        bad: list[Any] = ["x", True]
        if not self.integer:
            bad += [math.nan, math.inf, -math.inf]
        else:
            bad += [1.5]
        if self.lo is not None:
            bad.append(self.lo if self.lo_open else self.lo - 1)
            if not self.lo_open and self.lo <= 0:
                bad.append(-1e9)
        else:
            bad.append(-math.inf)
        if self.hi is not None:
            bad.append(self.hi if self.hi_open else self.hi + 1)
        return bad


@dataclass(frozen=True)
class Choice(Check):
    options: tuple[str, ...]

    def problem(self, value: Any) -> str | None:
        if value not in self.options:
            return f"must be one of {', '.join(map(repr, self.options))}"
        return None

    def bad_values(self) -> list[Any]:
        return ["no-such-option", 1.0]


@dataclass(frozen=True)
class Flag(Check):
    """True or False."""

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else "must be true or false"

    def bad_values(self) -> list[Any]:
        return ["maybe", 2]


@dataclass(frozen=True)
class Text(Check):
    """A string; a non-empty one unless ``empty_ok``."""

    empty_ok: bool = False

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return "must be a string"
        if not self.empty_ok and not value.strip():
            return "must not be empty"
        return None

    def bad_values(self) -> list[Any]:
        return [1.5] + ([] if self.empty_ok else [""])


@dataclass(frozen=True)
class Optional(Check):
    """None (off / the method's own value), or a value ``inner`` accepts."""

    inner: Check

    def problem(self, value: Any) -> str | None:
        return None if value is None else self.inner.problem(value)

    def bad_values(self) -> list[Any]:
        return self.inner.bad_values()


@dataclass(frozen=True)
class Each(Check):
    """A list whose every item ``inner`` accepts; non-empty when ``nonempty``."""

    inner: Check
    nonempty: bool = True

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, list | tuple):
            return "must be a list"
        if self.nonempty and not value:
            return "must not be empty"
        for v in value:
            p = self.inner.problem(v)
            if p:
                return f"has an item {v!r} that {p}"
        return None

    def bad_values(self) -> list[Any]:
        return ([[]] if self.nonempty else []) + [[b] for b in self.inner.bad_values()]


@dataclass(frozen=True)
class Nested(Check):
    """A nested config: its own fields carry their checks."""

    def problem(self, value: Any) -> str | None:
        return None


POSITIVE = Number(lo=0, lo_open=True)
NON_NEGATIVE = Number(lo=0)
FINITE = Number()
SEED = Number(lo=0, integer=True, hint="numpy and torch refuse negative seeds")


def count(least: int = 1, hint: str = "") -> Number:
    """An integer >= ``least``."""
    return Number(lo=least, integer=True, hint=hint)


def setting(default: Any = MISSING, check: Check | None = None, *,
            factory: Any = MISSING) -> Any:
    """A dataclass field with its check (``factory``: a default factory, for nested configs)."""
    if check is None:
        raise TypeError("setting() needs a check: what values make sense for this field?")
    return dataclasses.field(default=default, default_factory=factory, metadata={KEY: check})


def field_check(f: dataclasses.Field) -> Check:
    try:
        return f.metadata[KEY]
    except KeyError:
        raise TypeError(f"field {f.name!r} declares no check; define it with "
                        "trainables.runtime.checks.setting(default, check)") from None


def check_fields(obj: Any, prefix: str = "") -> None:
    """Every field's check on ``obj`` and its nested configs; ValueError naming the first bad
    setting by its dotted key, its value and what it must be."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        chk = field_check(f)
        if isinstance(chk, Nested):
            check_fields(value, f"{prefix}{f.name}.")
            continue
        p = chk.problem(value)
        if p:
            raise ValueError(f"{prefix}{f.name}={value!r} {p}")


def leaf_fields(tp: Any, prefix: str = "") -> Sequence[tuple[str, Check]]:
    """(dotted key, check) of every non-nested field of a config type, nested ones walked."""
    out: list[tuple[str, Check]] = []
    for f in dataclasses.fields(tp):
        chk = field_check(f)
        if isinstance(chk, Nested):  # the default's own fields (a factory may pick the type)
            sub = f.default_factory() if f.default_factory is not MISSING else f.default
            out += leaf_fields(type(sub), f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", chk))
    return out
