"""The search report says plainly whether the confirmed winner is at least as good as the
baseline on the fresh seeds (issue 18: a winner 6 points below MCSE)."""

from __future__ import annotations

from orchestrator.results.search_report import against_baseline

SEEDS = [100, 101, 102, 103, 104]


def _scores(best, base):
    return {"best of s": {s: {"avg": v} for s, v in zip(SEEDS, best, strict=True)},
            "MCSE": {s: {"avg": v} for s, v in zip(SEEDS, base, strict=True)}}


def test_a_worse_winner_is_called_worse():
    line = against_baseline(_scores([69.0, 70.0, 68.0, 71.0, 69.0], [75.0, 76.0, 74.5, 75.5, 76.0]),
                            "best of s", "MCSE", SEEDS)
    assert line.startswith("**Against MCSE:** the winner is WORSE than the baseline, significantly:")
    assert "69.4 ± 1.1 against MCSE's 75.4 ± 0.7" in line and "Δ -6.00" in line
    assert "did not find a configuration that beats the baseline" in line


def test_a_tie_is_at_least_as_good_but_not_better():
    line = against_baseline(_scores([75.0, 76.0, 74.5, 75.5, 76.0], [75.0, 75.5, 74.5, 76.0, 75.9]),
                            "best of s", "MCSE", SEEDS)
    assert "the winner is at least as good:" in line and "not significantly better" in line


def test_an_incomplete_confirmation_is_said():
    scores = _scores([75.0] * 5, [75.0] * 5)
    del scores["MCSE"][104]
    assert "the confirmation is incomplete" in against_baseline(scores, "best of s", "MCSE", SEEDS)
