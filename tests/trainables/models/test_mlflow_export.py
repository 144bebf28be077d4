"""A student's MLflow model folder: its environment files name what a default index serves."""

from __future__ import annotations

import re

import pytest

from trainables.models.mlflow_export import DATA, requirement, write_mlflow_model


@pytest.mark.parametrize("version,pinned", [("2.13.0+cpu", "torch==2.13.0"),
                                            ("2.13.0+cu128", "torch==2.13.0"),
                                            ("2.13.0", "torch==2.13.0"), (None, "torch")])
def test_a_local_build_label_is_not_pinned(version, pinned):
    assert requirement("torch", version) == pinned


def test_the_model_folder_pins_public_versions(tmp_path):
    (tmp_path / DATA).mkdir()
    (tmp_path / DATA / "config.json").write_text("{}")
    write_mlflow_model(tmp_path)
    reqs = (tmp_path / "requirements.txt").read_text().split()
    assert [r.split("==")[0] for r in reqs] == ["sentence-transformers", "transformers", "torch"]
    for r in reqs:  # public version numbers only (PEP 440 without a '+local' label)
        assert re.fullmatch(r"[a-z-]+(==[0-9][0-9a-z.]*)?", r), r
    conda = (tmp_path / "conda.yaml").read_text()
    assert "+" not in conda and all(f"  - {r}" in conda for r in reqs)
    assert (tmp_path / "MLmodel").is_file()
