"""Search spaces: ranges and choices checked at definition, Optuna params decoded to RunConfig
overrides by replaying the space, symbolic teachers resolved for the trial's profile."""

from __future__ import annotations

import pickle

import optuna
import pytest

from orchestrator.spec.spaces import (
    FloatRange,
    SearchSpace,
    check_choices,
    check_range,
    params_to_overrides,
)
from trainables.config.profiles import TEACHER_DIRS, build_config

M = {"objective.method": "mcse"}


# --- ranges and choices --------------------------------------------------------------------
def test_bad_ranges_raise_at_definition():
    with pytest.raises(ValueError, match=r"lam.*low=0.5 > high=0.1"):
        check_range("lam", 0.5, 0.1)
    with pytest.raises(ValueError, match="log-scale"):
        FloatRange("objective.lam", 0.0, 1.0, log=True)
    with pytest.raises(ValueError, match="finite"):
        FloatRange("m", 0.0, float("inf"))
    with pytest.raises(ValueError, match="finite"):
        check_range("m", float("nan"), 1.0)
    with pytest.raises(ValueError, match="low=0.3 > high=0.2"):
        FloatRange("m", 0.3, 0.2)
    check_range("m", 0.2, 0.2)  # a single point is a valid range


def test_float_range_suggests_within_its_bounds_on_its_scale():
    r = FloatRange("objective.lam", 1e-3, 1e-1, log=True)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        t = study.ask()
        v = r.suggest(t)
        assert 1e-3 <= v <= 1e-1 and t.params["objective.lam"] == v
        d = t.distributions["objective.lam"]
        assert d.log and (d.low, d.high) == (1e-3, 1e-1)


def test_choices_must_be_distinct_primitives():
    with pytest.raises(ValueError, match="encode as strings"):
        check_choices("teachers", [("simcse", "diffcse"), "simcse"])
    with pytest.raises(ValueError, match="distinct"):
        check_choices("x", ["a", "a"])
    with pytest.raises(ValueError, match="distinct"):
        check_choices("x", [])
    assert check_choices("t", ["off", 0.8, None]) == ("off", 0.8, None)


# --- param decoding ------------------------------------------------------------------------
LAM = FloatRange("objective.lam", 1e-3, 1e-1, log=True)


def _define(trial):
    LAM.suggest(trial)
    trial.suggest_categorical("objective.threshold", ["off", 0.8])
    m = trial.suggest_float("margin", 0.05, 0.3)
    return {"objective.text_margin": m, "objective.grounding_margin": m}


TOY = SearchSpace("toy", "toy search", {"objective.method": "kdmcse"}, _define, M)


def test_space_defaults_and_read_only_base():
    assert TOY.metric == "best_stsb_dev" and TOY.mode == "max" and TOY.num_samples == 20
    assert TOY.confirm_seeds == (100, 101, 102, 103, 104)  # fresh seeds, not the search's 0..4
    with pytest.raises(TypeError):
        TOY.base["objective.method"] = "mcse"  # type: ignore[index]
    assert dict(pickle.loads(pickle.dumps(TOY.baseline))) == M


def test_params_to_overrides_round_trip():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen_off = seen_on = False
    for _ in range(12):
        t = study.ask()
        _define(t)
        ov = params_to_overrides(TOY, t.params)
        o = build_config("demo", overrides=ov).objective
        assert o.method == "kdmcse"
        assert o.lam == t.params["objective.lam"]
        assert o.text_margin == o.grounding_margin == t.params["margin"]
        if t.params["objective.threshold"] == "off":
            seen_off = True
            assert o.threshold is None
        else:
            seen_on = True
            assert o.threshold == 0.8
        assert "margin" not in ov  # encoded params never reach RunConfig
    assert seen_off and seen_on


def test_params_to_overrides_accepts_tune_config_with_derived_keys():
    params = {"objective.lam": 0.01, "objective.threshold": 0.8, "margin": 0.2}
    tune_config = {**params, "objective.text_margin": 0.2, "objective.grounding_margin": 0.2}
    assert params_to_overrides(TOY, tune_config) == params_to_overrides(TOY, params)
    with pytest.raises(ValueError, match="contradicts"):
        params_to_overrides(TOY, {**params, "objective.text_margin": 0.1})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"objective.lam": 0.01, "objective.threshold": 0.8, "margin": 0.2, "lr": 1.0}, "'lr' is not in"),
        ({"objective.lam": 5.0, "objective.threshold": 0.8, "margin": 0.2}, "out of the range"),
        ({"objective.lam": 0.01, "margin": 0.2}, "do not fit"),
    ],
)
def test_params_to_overrides_rejects(params, message):
    with pytest.raises(ValueError, match=rf"search 'toy'.*{message}"):
        params_to_overrides(TOY, params)


# --- teachers as a search parameter --------------------------------------------------------
def _teacher_define(trial):
    trial.suggest_categorical("teachers", ["simcse+rankcse", "clip"])
    trial.suggest_float("teacher_alpha", 0.2, 0.8)


TEACHERS = SearchSpace("t", "teachers", {"objective.method": "dalr"}, _teacher_define,
                       {"objective.method": "mcse"})


def test_teacher_params_resolve_for_the_trials_profile(monkeypatch, tmp_path):
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    p = {"teachers": "simcse+rankcse", "teacher_alpha": 0.4}
    paper = params_to_overrides(TEACHERS, p, profile="paper")
    root = tmp_path / "teachers"
    assert paper["text_teachers"] == [str(root / TEACHER_DIRS["simcse"]), str(root / TEACHER_DIRS["rankcse"])]
    assert paper["objective.teacher_weights"] == pytest.approx([0.4, 0.6])
    # the reserved names are decoded, never passed on as settings
    assert "teachers" not in paper and "teacher_alpha" not in paper
    demo = params_to_overrides(TEACHERS, p, profile="demo")
    assert demo["text_teachers"] == ["minilm-l6", "minilm-l6"]  # structure kept, one demo model
    assert demo["objective.teacher_weights"] == paper["objective.teacher_weights"]
    one = params_to_overrides(TEACHERS, {"teachers": "clip", "teacher_alpha": 0.4}, profile="paper")
    assert one["text_teachers"] == [str(root / TEACHER_DIRS["clip"])]
    assert one["objective.teacher_weights"] == [1.0]  # alpha is moot for one teacher
    cfg = build_config("paper", overrides=paper)
    assert cfg.objective.method == "dalr" and len(cfg.text_teachers) == 2
