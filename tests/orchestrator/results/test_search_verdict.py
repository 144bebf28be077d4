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


# The case: the winner is a steady 0.8 below the baseline on every matched seed, while
# the seeds spread by ~1 point. The unpaired test sees noise; the paired one sees the effect.
BASE = [75.0, 76.2, 74.4, 75.8, 75.1]
STEADY = [b - 0.8 + d for b, d in zip(BASE, [0.05, -0.04, 0.02, -0.06, 0.03], strict=True)]


def test_matched_seeds_give_the_paired_verdict_with_the_unpaired_beside_it():
    from orchestrator.analysis.stats import compare

    c = compare(STEADY, BASE)
    assert c.t_student_p > 0.05 and c.paired_p < 0.05  # the two tests disagree here
    line = against_baseline(_scores(STEADY, BASE), "best of s", "MCSE", SEEDS)
    assert line.startswith("**Against MCSE:** the winner is WORSE than the baseline, "
                           "significantly:"), line
    assert (f"paired t-test over the 5 matched seeds p {c.paired_p:.1e}; unpaired Student p "
            f"{c.t_student_p:.3f}") in line  # 3.0e-06 and 0.104


def test_without_a_paired_test_the_student_test_decides():
    # every seed's difference the same: no spread, so no paired test (nan), Student decides
    line = against_baseline(_scores([b - 3.0 for b in BASE], BASE), "best of s", "MCSE", SEEDS)
    assert "WORSE than the baseline, significantly" in line and "paired" not in line
