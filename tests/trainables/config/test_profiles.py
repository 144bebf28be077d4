"""Teacher combinations: named symbolically ('simcse+rankcse'), resolved by the profile to paths
and DALR's teacher weights (DALR Table 9; docs/official-code.md for the 0.33 / 0.67 split)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainables.config.profiles import (
    DEFAULT_ALPHA,
    MINILM,
    TEACHER_DIRS,
    build_config,
    profile_overrides,
    teacher_overrides,
)


def test_teacher_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    ov = teacher_overrides("simcse+rankcse", alpha=0.4)
    assert ov["text_teachers"] == [str(tmp_path / "teachers" / "unsup-simcse-bert-base-uncased"),
                                   str(tmp_path / "teachers" / "RankCSE-listmle-bert-base-uncased")]
    assert ov["objective.teacher_weights"] == pytest.approx([0.4, 0.6])
    assert teacher_overrides("clip")["objective.teacher_weights"] == [1.0]
    assert teacher_overrides("simcse+diffcse", demo=True)["text_teachers"] == [MINILM, MINILM]
    assert teacher_overrides("simcse+diffcse")["objective.teacher_weights"] == [DEFAULT_ALPHA, 0.67]
    for bad in ("bert", "simcse+diffcse+rankcse", "simcse+"):
        with pytest.raises(ValueError, match="teacher combination"):
            teacher_overrides(bad)
    with pytest.raises(ValueError, match="teacher_alpha"):
        teacher_overrides("simcse+diffcse", alpha=1.0)


def test_default_teacher_pair_equals_the_paper_profile(monkeypatch, tmp_path):
    # The default combination must hash the same whether a grid states it or inherits it.
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    _, prof = profile_overrides("paper")
    assert teacher_overrides("simcse+diffcse")["text_teachers"] == prof["text_teachers"]
    a = build_config("paper", overrides={"objective.method": "dalr"})
    b = build_config("paper", overrides={"objective.method": "dalr", **teacher_overrides("simcse+diffcse")})
    assert a.config_hash() == b.config_hash()


def test_build_config_resolves_symbolic_teachers_per_profile(monkeypatch, tmp_path):
    """A grid names ``teachers`` (and ``teacher_alpha``); each profile says where they live."""
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path))
    ov = {"objective.method": "dalr", "teachers": "simcse+rankcse", "teacher_alpha": 0.25}
    paper = build_config("paper", overrides=ov)
    root = tmp_path / "teachers"
    assert paper.text_teachers == (str(root / TEACHER_DIRS["simcse"]), str(root / TEACHER_DIRS["rankcse"]))
    assert paper.objective.teacher_weights == pytest.approx((0.25, 0.75))
    demo = build_config("demo", overrides=ov)
    assert demo.text_teachers == (MINILM, MINILM)
    assert demo.objective.teacher_weights == paper.objective.teacher_weights
    # without teacher_alpha the code's default split; one teacher gets weight 1
    assert build_config("paper", overrides={**ov, "teacher_alpha": DEFAULT_ALPHA}).config_hash() == \
        build_config("paper", overrides={"objective.method": "dalr", "teachers": "simcse+rankcse"}).config_hash()
    single = build_config("paper", overrides={"objective.method": "dalr", "teachers": "diffcse"})
    assert single.text_teachers == (str(root / TEACHER_DIRS["diffcse"]),)
    assert single.objective.teacher_weights == (1.0,)
    # the default pair stated symbolically is the profile's own pair: one experiment, one hash
    assert build_config("paper", overrides={"objective.method": "dalr", "teachers": "simcse+diffcse"}) \
        .config_hash() == build_config("paper", overrides={"objective.method": "dalr"}).config_hash()
    with pytest.raises(ValueError, match="teacher combination 'bert'"):
        build_config("paper", overrides={"objective.method": "dalr", "teachers": "bert"})


# --- a profile file that starts from another one (``base:``) -----------------------------------
def test_a_profile_with_base_demo_changes_only_what_it_names(tmp_path):
    from trainables.config.profiles import explain_config

    mine = tmp_path / "mine.yaml"
    mine.write_text("base: demo\nlr: 1.0e-4\n")
    cfg = build_config(str(mine), "kdmcse")
    assert cfg.config_hash() == build_config("demo", "kdmcse", {"lr": 1e-4}).config_hash()
    assert cfg.lr == 1e-4 and cfg.max_steps == 60 and cfg.objective.lam == 1.0  # demo + recipe
    _, origins = explain_config(str(mine), [("cell KDMCSE", {"objective.method": "kdmcse"})])
    assert origins["lr"] == "profile mine"
    assert origins["encoder"] == origins["max_steps"] == "profile mine (base demo)"
    assert origins["objective.lam"] == "recipe kdmcse (mine)"


def test_a_profile_without_base_is_only_its_own_settings(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("lr: 1.0e-4\ndata:\n  demo: true\n")
    assert profile_overrides(str(plain)) == ("plain", {"lr": 1e-4, "data.demo": True})


def test_a_base_can_be_another_profile_file(tmp_path):
    from trainables.config.profiles import explain_config

    (tmp_path / "lab.yaml").write_text("base: demo\nbatch_size: 8\n")
    (tmp_path / "sub").mkdir()
    mine = tmp_path / "sub" / "mine.yaml"
    mine.write_text("base: ../lab.yaml\nlr: 1.0e-4\n")
    _, origins = explain_config(str(mine), [])
    cfg = build_config(str(mine))
    assert (cfg.batch_size, cfg.lr, cfg.max_steps) == (8, 1e-4, 60)
    assert origins["batch_size"] == origins["max_steps"] == "profile mine (base lab)"
    assert origins["lr"] == "profile mine"


@pytest.mark.parametrize("text,message", [
    ("base: demoo\n", "base: {d}/demoo does not exist; name demo, paper or an existing profile"),
    ("base: 3\n", "base: 3 must be demo, paper or a profile file"),
    ("base: me.yaml\n", "base: {d}/me.yaml leads back to this file"),
    ("base: demo\nlamda: 0.1\n", "unknown setting 'lamda'"),
])
def test_a_bad_base_names_the_file_and_the_fix(tmp_path, text, message):
    me = tmp_path / "me.yaml"
    me.write_text(text)
    with pytest.raises(ValueError, match="config file .*me.yaml: ") as e:
        profile_overrides(str(me))
    assert message.format(d=tmp_path) in str(e.value)


def test_a_grid_data_path_reads_mmemb_data_when_the_config_is_built(monkeypatch, tmp_path):
    from search_spaces._common import COCO

    for root in (tmp_path / "a", tmp_path / "b"):  # the grid module is imported once, before either
        monkeypatch.setenv("MMEMB_DATA", str(root))
        cfg = build_config("paper", overrides={"objective.method": "mcse", **COCO})
        assert cfg.data.pairs == str((root / "coco_clip_vitl14.parquet").resolve())
    monkeypatch.delenv("MMEMB_DATA")
    cfg = build_config("paper", overrides={"objective.method": "mcse", **COCO})
    assert cfg.data.pairs == str(Path("data/coco_clip_vitl14.parquet").resolve())
