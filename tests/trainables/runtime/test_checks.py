"""Every setting of every config type declares a check, and refuses nonsense in one line.

The cases are generated from the dataclass fields: a new field without a check, or with a check
that lets NaN, infinity, zero, a negative or a wrong type through where it must not, fails here.
The objective's settings are walked for every registered method: the built-in ones, the worked
example's (examples/softground.py) and a test plug-in's (tests/trainables/plugin_method.py).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

import tests.trainables.plugin_method  # noqa: F401  (registers "auxhead")
from trainables.config.run_config import RunConfig
from trainables.objectives.methods import get, load_methods, names
from trainables.runtime.checks import (
    POSITIVE,
    Choice,
    Each,
    Number,
    Optional,
    Text,
    check_fields,
    leaf_fields,
    setting,
)

load_methods([str(Path(__file__).resolve().parents[3] / "examples" / "softground.py")])
METHODS = names()
FIELDS = [(None, k, c) for k, c in leaf_fields(RunConfig) if not k.startswith("objective.")] + [
    (m, k, c) for m in METHODS for k, c in leaf_fields(get(m).settings, "objective.")]
BASE = {"data.demo": True}  # the demo needs no data paths, so only the bad value can fail


def test_every_field_of_every_config_declares_a_check():
    assert {"simcse", "mcse", "kdmcse", "dalr", "softground", "auxhead"} <= set(METHODS)
    keys = [(m, k) for m, k, _ in FIELDS]
    assert (None, "lr") in keys and ("mcse", "objective.lam") in keys
    assert ("dalr", "objective.use_rank") in keys and ("softground", "objective.alpha") in keys
    assert (None, "data.demo_dim") in keys
    assert len(keys) == len(set(keys)) > 80
    assert {m for m, _ in keys} == {None, *METHODS}  # every method has settings walked


CASES = [(m, key, bad) for m, key, chk in FIELDS for bad in chk.bad_values()]


@pytest.mark.parametrize(("method", "key", "bad"), CASES,
                         ids=[f"{m or 'run'}:{k}={b!r}" for m, k, b in CASES])
def test_each_setting_refuses_its_bad_values_in_one_line(method, key, bad):
    over = {**BASE, key: bad} if method is None else {**BASE, "objective.method": method, key: bad}
    with pytest.raises(ValueError) as e:
        RunConfig().with_overrides(over)
    msg = str(e.value)
    assert "\n" not in msg and key.split(".")[-1] in msg, msg


@pytest.mark.parametrize("bad", ["no-such-method", 1.0, None, ""])
def test_an_unknown_method_is_refused_in_one_line_naming_the_known_ones(bad):
    with pytest.raises(ValueError) as e:
        RunConfig().with_overrides({**BASE, "objective.method": bad})
    msg = str(e.value)
    assert "\n" not in msg and "objective.method" in msg and "kdmcse" in msg, msg


def test_the_defaults_and_the_demo_pass_their_checks():
    check_fields(RunConfig())
    RunConfig().with_overrides(BASE)


def test_a_field_without_a_check_is_found():
    @dataclasses.dataclass(frozen=True)
    class Mine:
        ok: float = setting(1.0, POSITIVE)
        forgot: float = 0.5

    with pytest.raises(TypeError, match="field 'forgot' declares no check"):
        check_fields(Mine())
    with pytest.raises(TypeError, match="forgot"):
        leaf_fields(Mine)
    with pytest.raises(TypeError, match="needs a check"):
        setting(1.0)


def test_checks_accept_what_makes_sense_and_say_what_they_want():
    assert Number(lo=0, lo_open=True).problem(1e-9) is None
    assert Number(lo=0, lo_open=True).problem(0.0) == "must be a finite number > 0"
    assert Number(0, math.pi, hi_open=True).problem(math.pi) is not None
    assert Number(lo=1, integer=True).problem(2) is None
    assert Number(lo=1, integer=True).problem(2.0) == "must be an integer >= 1"
    assert Number().problem(True) is not None  # a bool is not a number here
    assert Optional(POSITIVE).problem(None) is None
    assert Choice(("a", "b")).problem("c") == "must be one of 'a', 'b'"
    assert Each(POSITIVE).problem([1.0, -1.0]) == "has an item -1.0 that must be a finite number > 0"
    assert Each(POSITIVE, nonempty=False).problem([]) is None
    assert Text().problem("  ") == "must not be empty" and Text(empty_ok=True).problem("") is None
