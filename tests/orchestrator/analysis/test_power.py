"""Power analysis in orchestrator.analysis.stats against G*Power's published examples, an independent
integral, a simulation, and textbook binomial / chi-square intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sps

from orchestrator.analysis.stats import (
    clopper_pearson,
    detectable_difference,
    pooled_sd,
    sd_interval,
    seeds_needed,
    t_power,
)


@pytest.mark.parametrize(("d", "n", "power"), [
    # G*Power 3 (Faul et al. 2007), "t tests - Means: difference between two independent means",
    # a priori, two tails, alpha 0.05, power 0.80: n per group and the actual power it prints.
    (0.5, 64, 0.8014596), (0.8, 26, 0.8074866), (0.2, 394, 0.8005931),
])
def test_student_seeds_and_power_match_gpower(d, n, power):
    assert seeds_needed(d, 1.0) == n
    assert t_power(d, 1.0, n) == pytest.approx(power, abs=1e-6)
    assert t_power(d, 1.0, n - 1) < 0.8  # n is the fewest


@pytest.mark.parametrize(("dz", "n", "power"), [
    # G*Power, "t tests - Means: difference between two dependent means (matched pairs)"
    # (for dz = 0.2 only its n, 199, is checked).
    (0.5, 34, 0.8077775), (0.8, 15, 0.8213105), (0.2, 199, None),
])
def test_paired_seeds_and_power_match_gpower(dz, n, power):
    assert seeds_needed(dz, 1.0, design="paired") == n
    if power is not None:
        assert t_power(dz, 1.0, n, design="paired") == pytest.approx(power, abs=1e-6)


def test_detectable_difference_at_five_seeds():
    # G*Power sensitivity analysis, n1 = n2 = 5, alpha 0.05, power 0.8: d = 2.0244.
    assert detectable_difference(1.0, 5) == pytest.approx(2.0244, abs=1e-4)
    # Linear in sigma, and the power there is the asked one.
    d = detectable_difference(0.7, 5, power=0.9)
    assert d == pytest.approx(0.7 * detectable_difference(1.0, 5, power=0.9), rel=1e-9)
    assert t_power(d, 0.7, 5) == pytest.approx(0.9, abs=1e-8)
    # Paired, 5 pairs: a smaller df but SE sigma_d/sqrt(5).
    dp = detectable_difference(1.0, 5, design="paired")
    assert t_power(dp, 1.0, 5, design="paired") == pytest.approx(0.8, abs=1e-8)
    # df = 1 (2 pairs): c = 12.7, the nct tail that scipy returns as nan must not break the solve.
    d2 = detectable_difference(1.0, 2, design="paired")
    assert math.isfinite(d2) and t_power(d2, 1.0, 2, design="paired") == pytest.approx(0.8, abs=1e-8)


def test_power_equals_an_independent_integral():
    # P(|Z + lam| > c S), S = sqrt(chi2_df / df): integrate the normal tail over S's density.
    n, delta, sigma, alpha = 5, 1.3, 0.9, 0.05
    df, lam = 2 * n - 2, delta / (sigma * math.sqrt(2 / n))
    c = sps.t.ppf(1 - alpha / 2, df)

    def inner(s):
        dens = sps.chi.pdf(s * math.sqrt(df), df) * math.sqrt(df)
        return (sps.norm.sf(c * s - lam) + sps.norm.cdf(-c * s - lam)) * dens

    expected, _ = integrate.quad(inner, 0, np.inf)
    assert t_power(delta, sigma, n) == pytest.approx(expected, abs=1e-8)


def test_power_by_simulation():
    # 20,000 simulated 5-vs-5 experiments at the detectable difference reject ~80% of the time.
    rng = np.random.default_rng(12)
    d = detectable_difference(1.0, 5)
    a = rng.normal(d, 1.0, size=(20_000, 5))
    b = rng.normal(0.0, 1.0, size=(20_000, 5))
    rate = float(np.mean(sps.ttest_ind(a, b, axis=1).pvalue < 0.05))
    assert rate == pytest.approx(0.80, abs=0.015)  # 3 binomial SEs (0.0028 each) with margin
    null = float(np.mean(sps.ttest_ind(b, rng.normal(0.0, 1.0, size=b.shape), axis=1).pvalue < 0.05))
    assert null == pytest.approx(0.05, abs=0.01)


def test_unequal_groups_and_symmetry():
    assert t_power(1.0, 1.0, 5, n2=8) > t_power(1.0, 1.0, 5)
    assert t_power(-1.0, 1.0, 5) == pytest.approx(t_power(1.0, 1.0, 5))
    assert t_power(0.0, 1.0, 5) == pytest.approx(0.05, abs=1e-12)  # no effect: power = alpha


def test_degenerate_and_bad_inputs():
    assert detectable_difference(0.0, 5) == 0.0
    assert math.isnan(detectable_difference(math.nan, 5))
    assert seeds_needed(0.5, 0.0) == 2
    with pytest.raises(ValueError, match="zero difference"):
        seeds_needed(0.0, 1.0)
    with pytest.raises(ValueError, match="more than 50 seeds"):
        seeds_needed(0.1, 1.0, max_n=50)
    with pytest.raises(ValueError, match="n >= 2"):
        detectable_difference(1.0, 1)
    with pytest.raises(ValueError, match="power must be in"):
        detectable_difference(1.0, 5, power=0.04)
    with pytest.raises(ValueError, match="design"):
        t_power(1.0, 1.0, 5, design="welch")
    with pytest.raises(ValueError, match="drop n2"):
        t_power(1.0, 1.0, 5, design="paired", n2=5)


def test_pooled_sd():
    assert pooled_sd(1.0, 3.0, 5, 5) == pytest.approx(math.sqrt(5.0))
    assert pooled_sd(1.0, 2.0, 3, 5) == pytest.approx(math.sqrt((2 * 1 + 4 * 4) / 6))
    assert math.isnan(pooled_sd(1.0, 1.0, 1, 5))


def test_clopper_pearson_textbook_values():
    # The "exact" column of Newcombe (1998), Stat. Med. 17:857, Table I (81/263: 0.2527-0.3676;
    # 0/10: 0-0.3085; Wilson's 0.2553-0.3662 is narrower) and the symmetric 5/10 case.
    assert clopper_pearson(81, 263) == pytest.approx((0.2527, 0.3676), abs=1e-4)
    assert clopper_pearson(0, 10) == pytest.approx((0.0, 0.3085), abs=1e-4)
    assert clopper_pearson(5, 10) == pytest.approx((0.1871, 0.8129), abs=1e-4)
    assert clopper_pearson(10, 10)[1] == 1.0
    with pytest.raises(ValueError):
        clopper_pearson(3, 2)


def test_sd_interval_chi_square():
    lo, hi = sd_interval(1.0, 5)
    assert lo == pytest.approx(math.sqrt(4 / sps.chi2.ppf(0.975, 4)))
    assert (lo, hi) == pytest.approx((0.5991, 2.8736), abs=1e-4)
    assert all(math.isnan(x) for x in sd_interval(1.0, 1))


def test_compare_reports_the_detectable_differences():
    from orchestrator.analysis.stats import compare

    v = {0: 77.1, 1: 77.6, 2: 76.9, 3: 77.8, 4: 77.3}
    b = {0: 75.2, 1: 75.9, 2: 74.8, 3: 76.0, 4: 75.5}
    c = compare(v, b)
    sp = math.sqrt((np.var(list(v.values()), ddof=1) + np.var(list(b.values()), ddof=1)) / 2)
    sd = float(np.std([v[s] - b[s] for s in v], ddof=1))
    assert c.sd_pooled == pytest.approx(sp) and c.sd_diff == pytest.approx(sd)
    assert c.detectable_student == pytest.approx(2.0244393 * sp, rel=1e-6)
    assert c.detectable_paired == pytest.approx(detectable_difference(sd, 5, design="paired"))
    assert compare(v, b, power=0.9).detectable_student > c.detectable_student
    # Constant paired differences: no paired test, so no paired power either.
    const = compare({s: x + 1 for s, x in b.items()}, b)
    assert math.isnan(const.detectable_paired) and math.isfinite(const.detectable_student)


def test_directional_power_is_one_tail_of_the_two_sided_test():
    both = t_power(0.5, 1.0, 5)
    up, down = t_power(0.5, 1.0, 5, direction=1), t_power(0.5, 1.0, 5, direction=-1)
    assert up + down == pytest.approx(both, abs=1e-12)
    assert t_power(0.0, 1.0, 5, direction=1) == pytest.approx(0.025, abs=1e-12)  # alpha / 2
    # A true difference of the wrong sign is almost never found the right way round.
    assert t_power(-1.0, 0.3, 5, direction=1) < 1e-4
    # By simulation: the share of 5-vs-5 tests rejecting with t > c.
    rng = np.random.default_rng(7)
    a, b = rng.normal(0.8, 1, size=(20_000, 5)), rng.normal(0, 1, size=(20_000, 5))
    res = sps.ttest_ind(a, b, axis=1)
    rate = float(np.mean((res.pvalue < 0.05) & (res.statistic > 0)))
    assert rate == pytest.approx(t_power(0.8, 1.0, 5, direction=1), abs=0.012)
    with pytest.raises(ValueError, match="direction"):
        t_power(0.5, 1.0, 5, direction=2)
