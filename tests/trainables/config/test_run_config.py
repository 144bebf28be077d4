from __future__ import annotations

import pytest

from trainables.config.profiles import build_config, profile_overrides
from trainables.config.run_config import RunConfig, flatten, load_yaml, parse_cli_overrides


def test_overrides_set_nested_fields_and_coerce_types():
    cfg = RunConfig().with_overrides(
        {"objective.method": "kdmcse", "objective.threshold": 1, "lr": 2e-5, "seed": 3,
         "text_teachers": ["a", "b"], "data.pairs": "/x.parquet"}
    )
    assert cfg.objective.method == "kdmcse"
    assert cfg.objective.threshold == 1.0 and isinstance(cfg.objective.threshold, float)
    assert cfg.text_teachers == ("a", "b")
    assert cfg.seed == 3


def test_unknown_key_names_the_key_and_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown setting 'objective.margn'.*grounding_margin"):
        RunConfig().with_overrides({"objective.margn": 0.1})


def test_wrong_type_is_refused():
    with pytest.raises(ValueError, match="'batch_size' expects int"):
        RunConfig().with_overrides({"batch_size": "big"})


@pytest.mark.parametrize("key,value,msg", [
    ("lr", -1.0, "lr=-1.0 must be a finite number > 0"),
    ("batch_size", 1, "batch_size=1 must be an integer >= 2"),
    ("schedule", "random", "schedule='random'"),
    ("num_workers", 3, "must split evenly"),
])
def test_nonsense_values_fail_validation(key, value, msg):
    with pytest.raises(ValueError, match=msg):
        RunConfig().with_overrides({"data.pairs": "/x", key: value})


def test_multimodal_method_without_pairs_names_the_fix():
    with pytest.raises(ValueError, match="set data.pairs"):
        RunConfig().with_overrides({"objective.method": "mcse"})


def test_hash_is_stable_and_sensitive():
    a = RunConfig().with_overrides({"data.pairs": "/x"})
    b = RunConfig().with_overrides({"data.pairs": "/x"})
    assert a.config_hash() == b.config_hash()
    assert len(a.config_hash()) == 12
    assert a.with_overrides({"seed": 1}).config_hash() != a.config_hash()
    assert a.with_overrides({"objective.lam": 0.5}).config_hash() != a.config_hash()
    # where caches live is not part of what the experiment is
    assert a.with_overrides({"data.cache_dir": "/elsewhere"}).config_hash() == a.config_hash()


def test_round_trip_through_dict():
    cfg = RunConfig().with_overrides({"objective.method": "dalr", "data.pairs": "/p",
                                      "text_teachers": ["t1", "t2"]})
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


def test_cli_and_yaml_overrides(tmp_path):
    assert parse_cli_overrides(["lr=2e-5", "objective.threshold=none", "final_eval=false"]) == {
        "lr": 2e-5, "objective.threshold": None, "final_eval": False}
    with pytest.raises(ValueError, match="not key=value"):
        parse_cli_overrides(["lr"])
    f = tmp_path / "run.yaml"
    f.write_text("objective:\n  method: kdmcse\nlr: 1.0e-5\n")
    assert load_yaml(f) == {"objective.method": "kdmcse", "lr": 1e-5}
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="must hold a mapping"):
        load_yaml(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    with pytest.raises(ValueError, match=r"not valid YAML at line 2, column 1 \(expected ','"):
        load_yaml(broken)  # the line and the problem, as a YAML editor names them
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    with pytest.raises(FileNotFoundError, match="is a folder; pass the YAML file inside it"):
        load_yaml(tmp_path)


def test_flatten_only_descends_into_sections():
    assert flatten({"objective": {"lam": 0.1}, "text_teachers": ["a"]}) == {
        "objective.lam": 0.1, "text_teachers": ["a"]}


def test_profiles(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MMEMB_PROFILE", raising=False)
    assert profile_overrides(None)[0] == "demo"  # nothing configured -> the demo
    demo = build_config(None, "kdmcse")
    assert demo.data.demo and demo.objective.method == "kdmcse"
    assert demo.data.cache_dir.startswith("/")  # anchored: trials run in other directories
    paper = build_config("paper", "dalr")
    assert (paper.lr, paper.batch_size, paper.epochs) == (2e-5, 128, 4)  # DALR's script
    (tmp_path / "mine.yaml").write_text("encoder: roberta-base\ndata:\n  demo: true\n")
    assert build_config(str(tmp_path / "mine.yaml"), "mcse").encoder == "roberta-base"
    with pytest.raises(ValueError, match="unknown profile 'nope'"):
        profile_overrides("nope")


def test_transfer_setting_is_checked_and_hashes_only_when_on():
    base = RunConfig().with_overrides({"objective.method": "simcse"})
    fast = base.with_overrides({"transfer": "fast"})
    assert fast.transfer == "fast" and fast.config_hash() != base.config_hash()
    assert base.with_overrides({"transfer": None}).config_hash() == base.config_hash()
    with pytest.raises(ValueError, match="transfer"):
        base.with_overrides({"transfer": "test"})
    with pytest.raises(ValueError, match="set final_eval=true or transfer=null"):
        base.with_overrides({"transfer": "full", "final_eval": False})
