"""orchestrator.analysis.calibration's numbers on simulated seeds whose truth is known: A/A rates near alpha,
power near the noncentral-t prediction, Holm's family bound; its pieces against scipy and
stats.holm."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from orchestrator.analysis.calibration import (
    aa_rates,
    calibrate,
    control_power,
    disjoint_of,
    draws_of,
    holm_any,
    jackknife_rate,
    pvalues,
)
from orchestrator.analysis.stats import holm, t_power
from orchestrator.analysis.tables import STS_TASKS
from orchestrator.results.calibration_report import to_markdown


def _runs(rng, n, mean, sd, first=0):
    """n runs: a per-run shift shared by the seven tasks (a seed moves all of them) + task noise."""
    out = {}
    for s in range(first, first + n):
        shift = rng.normal(0, sd)
        out[s] = {t: mean + shift + rng.normal(0, sd / 3) for t in STS_TASKS}
    return out


def test_pvalues_match_scipy_row_by_row():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(7, 5)), rng.normal(0.5, 1, size=(7, 5))
    p = pvalues(a, b)
    for i in range(7):
        assert p["student"][i] == pytest.approx(sps.ttest_ind(a[i], b[i]).pvalue, rel=1e-12)
        assert p["welch"][i] == pytest.approx(sps.ttest_ind(a[i], b[i], equal_var=False).pvalue, rel=1e-12)
        assert p["paired"][i] == pytest.approx(sps.ttest_rel(a[i], b[i]).pvalue, rel=1e-12)
    const = pvalues(np.ones((1, 5)), np.ones((1, 5)))
    assert all(math.isnan(v[0]) for v in const.values())  # no test, never a fake p


def test_holm_any_equals_stats_holm():
    rng = np.random.default_rng(1)
    p = rng.uniform(0, 0.05, size=(500, 24)) ** rng.uniform(0.5, 2, size=(500, 1))
    p[::7, 3] = np.nan
    expected = np.array([bool(np.any(holm(row)[~np.isnan(row)] < 0.05)) for row in p])
    assert (holm_any(p, 0.05) == expected).all() and expected.any() and not expected.all()


def test_draws_and_disjoint_splits():
    rng = np.random.default_rng(2)
    d = draws_of(12, 10, 500, rng)
    assert d.shape == (500, 10) and all(len(set(r)) == 10 for r in d.tolist())
    assert set(d.ravel()) == set(range(12))
    s = disjoint_of(23, 10, rng)
    assert s.shape == (2, 10) and len(set(s.ravel())) == 20


def test_jackknife_by_hand():
    # Units 0..2; draws use one unit each, hits on unit 0 only: theta_i without unit i.
    used = np.array([[0], [1], [2], [0]])
    hits = np.array([True, False, False, True])
    rate, (lo, hi) = jackknife_rate(hits, used, 3)
    thetas = np.array([0.0, 2 / 3, 2 / 3])  # leave 0 out: 0/2; leave 1 out: 2/3; leave 2 out: 2/3
    se = math.sqrt(2 / 3 * np.sum((thetas - thetas.mean()) ** 2))
    assert rate == 0.5 and (lo, hi) == pytest.approx((max(0, 0.5 - 1.96 * se), min(1, 0.5 + 1.96 * se)))
    # Every draw agrees: no interval rather than a zero-width one.
    assert math.isnan(jackknife_rate(np.ones(4, bool), used, 3)[1][0])


def test_aa_rates_are_near_alpha_on_normal_seeds():
    rng = np.random.default_rng(3)
    values = rng.normal(80, 0.4, size=(60, 8))
    rates, ps = aa_rates(values, 5, 0.05, 50_000, rng, family_cells=3)
    for t in ("student", "welch", "paired"):
        r = rates[t]
        assert r.resampled == pytest.approx(0.05, abs=0.02), t
        assert r.resampled_ci[0] < 0.05 < r.resampled_ci[1], t
        assert r.m == 6 and 0 <= r.k <= 6
    assert rates["student"].draws == 50_000 and len(ps["student"]) == 50_000
    # Independent columns: 24 tests give about 1 - 0.95^24 = 71% 'any *'; Holm keeps it <= 5%.
    assert rates["family_any_star"].resampled > 0.5
    assert rates["family_holm"].resampled <= 0.05 + 0.02


def test_aa_rates_need_two_groups():
    with pytest.raises(ValueError, match="at least 10 runs"):
        aa_rates(np.zeros((9, 8)), 5, 0.05, 100, np.random.default_rng(0))


def test_control_power_matches_the_noncentral_t():
    rng = np.random.default_rng(4)
    k, delta, sd = 14, -0.6, 0.4
    base = rng.normal(0, sd, size=k)
    ctrl = rng.normal(delta, sd, size=k)  # independent of base: paired sigma_d = sqrt(2) sd
    found = control_power(ctrl, base, 5, 0.05, -1, 10_000, rng)
    assert found["student"].draws == math.comb(14, 5) == 2002  # every subset
    # The resampled share estimates the power at the measured (not the true) values.
    d, sp = float(np.mean(ctrl - base)), math.sqrt((np.var(ctrl, ddof=1) + np.var(base, ddof=1)) / 2)
    assert found["student"].resampled == pytest.approx(t_power(d, sp, 5), abs=0.05)
    lo, hi = found["student"].resampled_ci
    assert lo < t_power(abs(delta), sd, 5) < hi  # the true power (0.55) lies in the interval
    wrong = control_power(ctrl, base, 5, 0.05, +1, 10_000, rng)  # the other published sign
    assert wrong["student"].resampled == pytest.approx(0.0, abs=0.01)


def test_calibrate_end_to_end_on_simulated_runs():
    rng = np.random.default_rng(5)
    # SimCSE first, as MLflow may return it: the baseline still leads everything.
    res = {"SimCSE": _runs(rng, 10, 78.8, 0.3), "MCSE": _runs(rng, 22, 80.0, 0.3)}
    res["MCSE"][21]["STS12"] = float("nan")  # a broken run is left out, and said so
    cal = calibrate(res, draws=20_000)
    assert cal.spreads["MCSE"].n == 21 and cal.dropped == {"MCSE": [21]}
    assert list(cal.spreads) == ["MCSE", "SimCSE"]
    assert cal.spreads["MCSE"].sd == pytest.approx(0.3, abs=0.12)
    assert cal.control is not None and cal.control.seeds == tuple(range(10))
    assert cal.control.diff == pytest.approx(-1.2, abs=0.4)
    assert cal.control.found["paired"].resampled > 0.8  # a 4-sigma effect is found
    need = cal.seeds_for(cal.spreads["MCSE"].sd)
    assert need[0.4] > need[0.8] >= need[1.3] >= 2
    md = to_markdown(cal, "22 MCSE runs")
    for text in ("### Verdict", "False positives, Student t", "anything significant after Holm",
                 "Known effect: SimCSE − MCSE", "seeds [21] left out",
                 "a seed std in the published range", "| 2.000 |"):
        assert text in md, text


def test_calibrate_without_control_or_family():
    rng = np.random.default_rng(6)
    cal = calibrate({"MCSE": _runs(rng, 12, 80.0, 0.3)}, draws=2_000)
    assert cal.control is None and "family_holm" not in cal.aa
    md = to_markdown(cal)
    assert "Known effect: not measured" in md and "Table-wide rates need 20 MCSE runs" in md
