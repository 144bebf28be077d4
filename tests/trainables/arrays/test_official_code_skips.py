"""Issue 49: the official-code test's DALR cases skipped silently where scikit-learn (which DALR's
official ``tool.py`` imports) is missing; the skip now says so and how to install it."""

from __future__ import annotations

import sys

import pytest

from tests.trainables.arrays import test_official_code


def test_the_dalr_cases_say_why_they_skip_without_scikit_learn(tmp_path, monkeypatch):
    src = tmp_path / "DALR" / "src"
    src.mkdir(parents=True)
    (src / "model_modified.py").write_text("")
    monkeypatch.setattr(test_official_code, "ROOT", str(tmp_path))
    monkeypatch.setitem(sys.modules, "sklearn", None)  # as on a machine without it
    monkeypatch.delitem(sys.modules, "official_dalr", raising=False)
    with pytest.raises(pytest.skip.Exception) as e:
        test_official_code.official("dalr")
    assert "DALR's official tool.py imports scikit-learn" in str(e.value)
    assert "pip install scikit-learn" in str(e.value)
