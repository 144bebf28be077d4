"""orchestrator.analysis.stats against scipy's own tests, textbook worked examples and hand formulas."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from orchestrator.analysis.stats import compare, hedges_correction, hedges_g, holm

# Five seeds, Spearman x 100, shaped like a paper cell and its baseline.
BASE = {0: 75.1, 1: 76.4, 2: 74.2, 3: 75.9, 4: 75.0}
VAR = {0: 77.0, 1: 77.9, 2: 76.1, 3: 77.2, 4: 78.3}


def _arrays(v: dict, b: dict) -> tuple[np.ndarray, np.ndarray]:
    seeds = sorted(set(v) & set(b))
    return np.array([v[s] for s in seeds]), np.array([b[s] for s in seeds])


def test_tests_match_scipy_on_fixed_arrays():
    c = compare(VAR, BASE)
    v, b = _arrays(VAR, BASE)
    assert c.t_student_p == pytest.approx(sps.ttest_ind(v, b, equal_var=True).pvalue, rel=1e-12)
    assert c.welch_p == pytest.approx(sps.ttest_ind(v, b, equal_var=False).pvalue, rel=1e-12)
    assert c.paired_p == pytest.approx(sps.ttest_rel(v, b).pvalue, rel=1e-12)
    assert c.mean_variant == pytest.approx(v.mean())
    assert c.std_baseline == pytest.approx(np.std(b, ddof=1))
    assert c.diff == pytest.approx(v.mean() - b.mean())
    assert (c.n_variant, c.n_baseline, c.n_paired) == (5, 5, 5)


def test_pairs_by_seed_id_not_by_position():
    shuffled = {s: VAR[s] for s in (3, 0, 4, 1, 2)}
    c = compare(shuffled, BASE)
    v, b = _arrays(VAR, BASE)
    assert c.paired_p == pytest.approx(sps.ttest_rel(v, b).pvalue, rel=1e-12)
    # Pairing by position would pair VAR[3] with BASE[0] etc.: a different p.
    wrong = sps.ttest_rel(list(shuffled.values()), list(BASE.values())).pvalue
    assert not math.isclose(c.paired_p, wrong)


def test_paired_uses_only_seeds_present_in_both():
    v = {0: 77.0, 1: 77.9, 2: 76.1, 3: 77.2}
    b = {1: 76.4, 2: 74.2, 3: 75.9, 4: 75.0}
    c = compare(v, b)
    assert (c.n_variant, c.n_baseline, c.n_paired) == (4, 4, 3)
    expected = sps.ttest_rel([77.9, 76.1, 77.2], [76.4, 74.2, 75.9]).pvalue
    assert c.paired_p == pytest.approx(expected, rel=1e-12)
    # Unpaired tests still use every value of each group.
    assert c.t_student_p == pytest.approx(sps.ttest_ind(list(v.values()), list(b.values())).pvalue)


def test_sequence_input_reads_positions_as_seeds():
    c = compare(list(VAR.values()), list(BASE.values()))
    assert c.paired_p == pytest.approx(compare(VAR, BASE).paired_p)


def test_significance_star_threshold_follows_student_p():
    clear = compare(VAR, BASE)  # ~2-point gap with ~0.8 std
    assert clear.t_student_p < 0.05 and clear.significant
    noisy = compare({0: 75.0, 1: 77.5, 2: 73.9, 3: 76.8, 4: 75.6}, BASE)
    assert noisy.t_student_p > 0.05 and not noisy.significant
    # alpha is honoured.
    assert not compare(VAR, BASE, alpha=clear.t_student_p / 2).significant


def test_hedges_g_borenstein_worked_example():
    # Borenstein, Hedges, Higgins & Rothstein (2009), Introduction to Meta-Analysis, ch. 4:
    # means 103 vs 100, SDs 5.5 and 4.5, n = 50 each -> S_within 5.0249, d 0.5970,
    # J = 1 - 3/(4*98 - 1) = 0.9923, g = 0.5924. Our exact J differs only in the 6th decimal.
    assert hedges_g(103.0, 100.0, 5.5, 4.5, 50, 50) == pytest.approx(0.5924, abs=5e-5)
    # The same example from raw data with exactly those means and SDs.
    rng = np.random.default_rng(0)

    def sample(mean: float, sd: float) -> np.ndarray:
        z = rng.normal(size=50)
        return mean + sd * (z - z.mean()) / z.std(ddof=1)

    c = compare(sample(103.0, 5.5).tolist(), sample(100.0, 4.5).tolist())
    assert c.hedges_g == pytest.approx(0.5924, abs=5e-5)


def test_hedges_correction_exact_gamma_form():
    for df in (2, 3, 8, 18, 98):
        exact = math.gamma(df / 2) / (math.sqrt(df / 2) * math.gamma((df - 1) / 2))
        assert hedges_correction(df) == pytest.approx(exact, rel=1e-12)
        if df >= 8:  # the usual approximation is close only from moderate df on
            assert hedges_correction(df) == pytest.approx(1 - 3 / (4 * df - 1), abs=1e-3)
    # n1 = n2 = 5: d times J on the pooled SD, computed by hand.
    v, b = _arrays(VAR, BASE)
    sp = math.sqrt((4 * v.var(ddof=1) + 4 * b.var(ddof=1)) / 8)
    j8 = math.gamma(4) / (2 * math.gamma(3.5))
    assert compare(VAR, BASE).hedges_g == pytest.approx(j8 * (v.mean() - b.mean()) / sp)


def test_welch_ci_by_hand_and_against_scipy():
    v, b = _arrays(VAR, BASE)
    w1, w2 = v.var(ddof=1) / 5, b.var(ddof=1) / 5
    df = (w1 + w2) ** 2 / (w1**2 / 4 + w2**2 / 4)
    half = sps.t.ppf(0.975, df) * math.sqrt(w1 + w2)
    c = compare(VAR, BASE)
    assert c.ci_method == "welch"
    assert (c.ci_low, c.ci_high) == pytest.approx((c.diff - half, c.diff + half), rel=1e-12)
    ref = sps.ttest_ind(v, b, equal_var=False).confidence_interval(0.95)
    assert (c.ci_low, c.ci_high) == pytest.approx((ref.low, ref.high), rel=1e-10)


def test_student_and_paired_ci_against_scipy():
    v, b = _arrays(VAR, BASE)
    s = compare(VAR, BASE, ci="student")
    ref = sps.ttest_ind(v, b, equal_var=True).confidence_interval(0.95)
    assert (s.ci_low, s.ci_high) == pytest.approx((ref.low, ref.high), rel=1e-10)
    p = compare(VAR, BASE, ci="paired", confidence=0.9)
    ref = sps.ttest_rel(v, b).confidence_interval(0.9)
    assert (p.ci_low, p.ci_high) == pytest.approx((ref.low, ref.high), rel=1e-10)


def test_holm_textbook_example():
    # Holm-Bonferroni on p = (0.01, 0.04, 0.03, 0.005), alpha 0.05: sorted 0.005, 0.01, 0.03, 0.04
    # -> 4*0.005 = 0.02, 3*0.01 = 0.03, 2*0.03 = 0.06, max(1*0.04, 0.06) = 0.06 (monotone).
    # H1 and H4 are rejected, H2 and H3 are not (the classic worked example).
    adj = holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adj, [0.03, 0.06, 0.06, 0.02], rtol=1e-12)
    assert list(adj <= 0.05) == [True, False, False, True]


def test_holm_caps_at_one_keeps_shape_and_skips_nan():
    np.testing.assert_allclose(holm([0.5, 0.6, 0.01]), [1.0, 1.0, 0.03])
    grid = holm(np.array([[0.01, np.nan], [0.02, 0.04]]))
    assert grid.shape == (2, 2) and np.isnan(grid[0, 1])
    # m = 3 finite p-values: 3*0.01, max(2*0.02, 0.03), max(0.04, 0.04).
    np.testing.assert_allclose(grid[~np.isnan(grid)], [0.03, 0.04, 0.04])
    assert holm([]).shape == (0,)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.2, 1.5])


def test_n_below_two_gives_nan_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = compare({0: 77.0}, BASE)
        e = compare({}, {})
    assert c.n_variant == 1 and c.mean_variant == 77.0 and math.isnan(c.std_variant)
    for x in (c.t_student_p, c.welch_p, c.paired_p, c.hedges_g, c.ci_low, c.ci_high):
        assert math.isnan(x)
    assert not c.significant
    assert e.n_variant == 0 and math.isnan(e.diff) and not e.significant


def test_zero_variance_in_both_groups_is_nan_not_fake_zero():
    # scipy gives t = -inf, p = 0.0 here; there is no noise estimate, so no test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert sps.ttest_ind([1.0, 1.0, 1.0], [2.0, 2.0, 2.0]).pvalue == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = compare([0.1] * 5, [0.2] * 5)
    assert c.diff == pytest.approx(-0.1)
    for x in (c.t_student_p, c.welch_p, c.paired_p, c.hedges_g, c.ci_low, c.ci_high):
        assert math.isnan(x)
    assert not c.significant


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # the scipy reference calls
def test_zero_variance_in_one_group_is_a_real_test():
    b = [75.0] * 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's "catastrophic cancellation" must not leak out
        c = compare(VAR, b)
    v = list(VAR.values())
    assert c.t_student_p == pytest.approx(sps.ttest_ind(v, b).pvalue)
    assert c.welch_p == pytest.approx(sps.ttest_ind(v, b, equal_var=False).pvalue)
    assert math.isfinite(c.hedges_g) and math.isfinite(c.ci_low)


def test_constant_paired_differences_give_nan_paired_p():
    shifted = {s: x + 1.5 for s, x in BASE.items()}
    c = compare(shifted, BASE)
    assert math.isnan(c.paired_p)
    assert c.t_student_p == pytest.approx(sps.ttest_ind(list(shifted.values()), list(BASE.values())).pvalue)


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="variant: seed 2 has non-finite value nan"):
        compare({0: 1.0, 1: 2.0, 2: float("nan")}, BASE)
    with pytest.raises(ValueError, match="baseline: seed 1 has non-numeric"):
        compare(VAR, {0: 1.0, 1: "x"})
    with pytest.raises(ValueError, match="alpha"):
        compare(VAR, BASE, alpha=5)
    with pytest.raises(ValueError, match="ci must be one of"):
        compare(VAR, BASE, ci="bootstrap")
