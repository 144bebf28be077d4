"""Every setting of every config type declares a check, and refuses nonsense in one line.

The cases are generated from the dataclass fields: a new field without a check, or with a check
that lets NaN, infinity, zero, a negative or a wrong type through where it must not, fails here.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from trainables.checks import (
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
from trainables.config import RunConfig

FIELDS = leaf_fields(RunConfig)
BASE = {"data.demo": True}  # the demo needs no data paths, so only the bad value can fail


def test_every_field_of_every_config_declares_a_check():
    keys = [k for k, _ in FIELDS]
    assert "lr" in keys and "objective.lam" in keys and "data.demo_dim" in keys
    assert len(keys) == len(set(keys)) > 50


CASES = [(key, bad) for key, chk in FIELDS for bad in chk.bad_values()]


@pytest.mark.parametrize(("key", "bad"), CASES, ids=[f"{k}={b!r}" for k, b in CASES])
def test_each_setting_refuses_its_bad_values_in_one_line(key, bad):
    with pytest.raises(ValueError) as e:
        RunConfig().with_overrides({**BASE, key: bad})
    msg = str(e.value)
    assert "\n" not in msg and key.split(".")[-1] in msg, msg


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
