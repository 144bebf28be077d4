"""A member fails alone: one whose setup fails (teachers that cannot be built) or whose step
raises (a plug-in head that does not fit its loss) leaves the array with its reason in one line;
its array-mates train on, exactly as they would without it. Also: a combination that names one
teacher model twice (the demo's teacher combinations) trains, as that teacher alone."""

from __future__ import annotations

import pytest

import tests.trainables.misfit_method  # noqa: F401  (registers the plug-in method "misfit")
from tests.trainables.arrays.harness import assert_same_member, cfg, run


def failed(reports):
    return {e["key"]: e["error"] for r in reports.metrics for e in r["members"] if e.get("failed")}


def test_a_member_that_cannot_be_set_up_fails_alone(tiny_bert, cache, tmp_path):
    good = cfg(tiny_bert, cache, "mcse", seed=1)
    broken = cfg(tiny_bert, cache, "dalr", text_teachers=[str(tiny_bert), str(tmp_path / "nope")],
                 **{"objective.teacher_weights": [0.5, 0.5]})
    t, reports, final = run([("good", good), ("broken", broken)], tmp_path / "a")
    why = failed(reports)
    assert list(why) == ["broken"] and "could not be set up" in why["broken"]
    assert "\n" not in why["broken"] and "nope" in why["broken"]
    assert set(final) == {"good"} and t.failed == why
    _, alone, final_alone = run([("good", good)], tmp_path / "b")
    assert_same_member(reports, final, alone, final_alone, "good")


def test_a_member_whose_step_raises_fails_alone_naming_its_method(tiny_bert, cache, tmp_path):
    good = cfg(tiny_bert, cache, "mcse", seed=1)
    misfit = cfg(tiny_bert, cache, "misfit")
    t, reports, final = run([("misfit", misfit), ("good", good)], tmp_path / "a")
    why = failed(reports)["misfit"]
    assert "failed at step 1 in method 'misfit'" in why and "size of tensor a (7)" in why
    assert set(final) == {"good"} and t.step == t.total_steps
    _, alone, final_alone = run([("good", good)], tmp_path / "b")
    assert_same_member(reports, final, alone, final_alone, "good")


def test_one_teacher_named_twice_trains_as_that_teacher_alone(tiny_bert, cache, tmp_path):
    twice = cfg(tiny_bert, cache, "dalr", text_teachers=[str(tiny_bert)] * 2,
                **{"objective.teacher_weights": [0.33, 0.67]})
    once = cfg(tiny_bert, cache, "dalr", text_teachers=[str(tiny_bert)],
               **{"objective.teacher_weights": [1.0]})
    _, a, fa = run([("d", twice)], tmp_path / "a")
    _, b, fb = run([("d", once)], tmp_path / "b")
    assert not failed(a) and set(fa) == {"d"}
    # the same loss (0.33 x + 0.67 x = x up to float rounding), step by step
    ea, eb = a.member("d"), b.member("d")
    assert len(ea) == len(eb) > 0
    for x, y in zip(ea, eb, strict=True):
        for k in x:
            if k.startswith("loss/"):
                assert y[k] == pytest.approx(x[k], abs=1e-4), (k, x["step"])
