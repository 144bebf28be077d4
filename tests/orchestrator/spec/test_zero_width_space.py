"""Issue 49: a search whose only range is zero-wide (``FloatRange("objective.lam", 1.0, 1.0)``)
planned a search that could choose nothing, without a word."""

from __future__ import annotations

from orchestrator import search
from orchestrator.spec.spaces import FloatRange, SearchSpace
from orchestrator.spec.validate import validate_space
from tests.orchestrator.refusing import refused

SPACE = """
from orchestrator.spec.spaces import FloatRange, SearchSpace
LAM = FloatRange("objective.lam", 1.0, 1.0)
SPACE = SearchSpace(name="pinned", title="lambda pinned", base={"objective.method": "mcse"},
                    define=lambda t: LAM.suggest(t) and None,
                    baseline={"objective.method": "mcse"})
"""


def test_a_search_whose_only_range_is_zero_wide_is_refused(tmp_path, capsys, monkeypatch):
    space = tmp_path / "pinned.py"
    space.write_text(SPACE)
    work = tmp_path / "work"
    work.mkdir()
    line = refused(work, search.main, ["--space", str(space), "--profile", "demo", "--dry-run",
                                       "--storage", str(work / "runs")],
                   "search 'pinned': its only range has no width (objective.lam is 1.0 to 1.0), "
                   "so every draw is the same point", capsys, monkeypatch)
    assert "widen the range (low < high)" in line


def test_a_pinned_range_beside_a_real_one_is_still_a_search():
    lam, mu = FloatRange("objective.lam", 1.0, 1.0), FloatRange("objective.mu", 0.05, 1.0)

    def define(t):
        lam.suggest(t)
        mu.suggest(t)

    validate_space(SearchSpace(name="two", title="t", base={"objective.method": "dalr"},
                               define=define, baseline={"objective.method": "dalr"}))
