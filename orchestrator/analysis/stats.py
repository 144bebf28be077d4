"""Five-seed significance statistics for one table cell against its baseline (numpy + scipy only).

The papers (MCSE, KDMCSE, DALR) report mean +- std over five seeds and mark a cell with ``*`` when
an independent two-sample t-test against the baseline is significant at alpha = 0.05. This module
reproduces exactly that test (Student's, equal variances) and adds what a careful reader needs
beside it, none of which the papers or the tuning tools report:

* Welch's t-test (no equal-variance assumption) and a paired t-test over matched seeds (same seed
  id in both cells: the seed fixes data order and initialisation, so seeds are the pairing unit);
* Hedges' g, the bias-corrected standardised mean difference;
* a 95% confidence interval of the difference of means (Welch-Satterthwaite by default);
* Holm's step-down adjustment across a family of comparisons (all cells x columns of a table);
* power analysis for the t-tests (exact, noncentral t): the smallest true difference n seeds can
  detect with a given power, and the seeds a given difference needs (:func:`detectable_difference`,
  :func:`seeds_needed`), with exact binomial and chi-square intervals for calibration counts.

Why not Wilcoxon: with n = 5 pairs the exact two-sided signed-rank p-value can never go below
0.0625, so it could never mark anything at 0.05 (see docs: ecosystem "Statistics gotcha").

Degenerate inputs never crash and never produce a fake p = 0:

* fewer than 2 values in a group (or fewer than 2 matched pairs) -> that test's p, g and CI are nan;
* both groups constant (zero variance in both, so the standard error is 0 and t is 0/0 or x/0)
  -> Student p, Welch p, g and CI are nan (scipy would return p = 0 for t = +-inf);
* constant paired differences -> paired p is nan;
* a nan p counts as "not significant" and is left out of a Holm family (it is no test at all).

Non-finite input values are rejected: a diverged seed must be handled by the caller (the table
layer marks the cell INCOMPLETE) rather than silently dropped here.

Example:
    >>> c = compare({0: 77.1, 1: 77.6, 2: 76.9, 3: 77.8, 4: 77.3},
    ...             {0: 75.2, 1: 75.9, 2: 74.8, 3: 76.0, 4: 75.5})
    >>> round(c.diff, 2), c.significant
    (1.86, True)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

CI_METHODS = ("welch", "student", "paired")


@dataclass(frozen=True)
class Comparison:
    """One variant cell vs the baseline on one metric, over seeds. ``diff`` = variant - baseline."""

    n_variant: int
    n_baseline: int
    n_paired: int
    """seeds present in both groups (the paired test uses only these)"""
    mean_variant: float
    mean_baseline: float
    std_variant: float
    """sample std (ddof=1); nan when n < 2"""
    std_baseline: float
    diff: float
    """mean_variant - mean_baseline"""
    t_student_p: float
    """two-sided independent two-sample t-test, equal variances (the papers' test)"""
    welch_p: float
    """two-sided Welch t-test (unequal variances)"""
    paired_p: float
    """two-sided paired t-test over matched seeds"""
    hedges_g: float
    """(mean_v - mean_b) / pooled SD, times the exact small-sample correction J (see hedges_g)"""
    ci_low: float
    ci_high: float
    ci_method: str
    """how the CI was built: 'welch' (default), 'student' or 'paired'"""
    confidence: float
    alpha: float
    significant: bool
    """t_student_p < alpha (False when the p-value is nan)"""
    sd_pooled: float = math.nan
    """pooled per-seed std of the two groups (the Student test's sigma)"""
    sd_diff: float = math.nan
    """std of the matched-seed differences (the paired test's sigma)"""
    power: float = 0.8
    detectable_student: float = math.nan
    """smallest true difference the Student test detects with ``power`` at these n and sd_pooled"""
    detectable_paired: float = math.nan
    """same for the paired test, at n_paired and sd_diff"""


def _as_seed_map(values: Mapping[int, float] | Sequence[float], name: str) -> dict[int, float]:
    """Seed id -> value; a plain sequence is read as seeds 0..n-1 (its positions)."""
    items = values.items() if isinstance(values, Mapping) else enumerate(values)
    out: dict[int, float] = {}
    for seed, value in items:
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: seed {seed} has non-numeric value {value!r}") from None
        if not math.isfinite(v):
            raise ValueError(
                f"{name}: seed {seed} has non-finite value {v}; drop the failed seed or mark the "
                "cell incomplete before comparing"
            )
        out[seed] = v
    return out


def _constant(x: np.ndarray) -> bool:
    # Exact test: np.var of identical floats can come out as 1e-34 instead of 0.
    return x.size == 0 or bool(np.all(x == x[0]))


def _sd(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1)) if x.size >= 2 else math.nan


def hedges_correction(df: float) -> float:
    """Exact small-sample bias correction of Cohen's d (Hedges 1981, eq. 6e).

    J(df) = Gamma(df/2) / (sqrt(df/2) * Gamma((df-1)/2)), with df = n1 + n2 - 2; computed through
    log-gamma for stability. The common approximation is J ~ 1 - 3/(4 df - 1) = 1 - 3/(4(n1+n2)-9)
    (0.90323 vs exact 0.90270 at n1 = n2 = 5).
    """
    if not df > 1:
        return math.nan
    return math.exp(math.lgamma(df / 2) - 0.5 * math.log(df / 2) - math.lgamma((df - 1) / 2))


def hedges_g(mean1: float, mean2: float, sd1: float, sd2: float, n1: int, n2: int) -> float:
    """Hedges' g of group 1 vs group 2 from summary statistics.

    g = J(n1+n2-2) * (mean1 - mean2) / s_p, s_p = sqrt(((n1-1) sd1^2 + (n2-1) sd2^2) / (n1+n2-2)),
    with J the exact correction of :func:`hedges_correction`. nan when n1 < 2, n2 < 2 or s_p = 0.
    """
    if n1 < 2 or n2 < 2:
        return math.nan
    df = n1 + n2 - 2
    sp = math.sqrt(((n1 - 1) * sd1**2 + (n2 - 1) * sd2**2) / df)
    if sp == 0:
        return math.nan
    return hedges_correction(df) * (mean1 - mean2) / sp


def _ci(v: np.ndarray, b: np.ndarray, d: np.ndarray, method: str, confidence: float) -> tuple:
    """Confidence interval of mean(v) - mean(b) (or of mean(d) for 'paired')."""
    q = (1 + confidence) / 2
    if method == "paired":
        if d.size < 2 or _constant(d):
            return math.nan, math.nan
        centre, se, df = float(d.mean()), _sd(d) / math.sqrt(d.size), d.size - 1
    else:
        n1, n2 = v.size, b.size
        if n1 < 2 or n2 < 2 or (_constant(v) and _constant(b)):
            return math.nan, math.nan
        centre = float(v.mean() - b.mean())
        w1, w2 = _sd(v) ** 2 / n1, _sd(b) ** 2 / n2
        if method == "welch":
            se = math.sqrt(w1 + w2)
            # Welch-Satterthwaite degrees of freedom.
            df = (w1 + w2) ** 2 / (w1**2 / (n1 - 1) + w2**2 / (n2 - 1))
        else:
            df = n1 + n2 - 2
            sp2 = ((n1 - 1) * _sd(v) ** 2 + (n2 - 1) * _sd(b) ** 2) / df
            se = math.sqrt(sp2 * (1 / n1 + 1 / n2))
    half = float(sps.t.ppf(q, df)) * se
    return centre - half, centre + half


def compare(
    variant: Mapping[int, float] | Sequence[float],
    baseline: Mapping[int, float] | Sequence[float],
    alpha: float = 0.05,
    confidence: float = 0.95,
    ci: str = "welch",
    power: float = 0.8,
) -> Comparison:
    """Compare a variant cell with the baseline on one metric over seeds.

    Args:
        variant: seed id -> value (or a sequence, read as seeds 0..n-1).
        baseline: same, for the baseline cell; use the same seed list (paired design).
        alpha: level of the Student test that sets ``significant`` (papers: 0.05).
        confidence: level of the CI of the difference of means.
        ci: 'welch' (Welch-Satterthwaite df, default), 'student' (pooled SD, df = n1+n2-2) or
            'paired' (t interval of the mean matched-seed difference).
        power: the power at which the detectable differences are given. They plug the measured
            std in for the true one, so they are estimates as noisy as that std.

    Returns:
        A :class:`Comparison`; degenerate tests give nan as the module docstring lists.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if ci not in CI_METHODS:
        raise ValueError(f"ci must be one of {CI_METHODS}, got {ci!r}")
    _check_level(alpha, power)
    vmap, bmap = _as_seed_map(variant, "variant"), _as_seed_map(baseline, "baseline")
    v, b = np.array(list(vmap.values())), np.array(list(bmap.values()))
    common = sorted(set(vmap) & set(bmap))
    d = np.array([vmap[s] - bmap[s] for s in common])
    mean_v = float(v.mean()) if v.size else math.nan
    mean_b = float(b.mean()) if b.size else math.nan
    sd_v, sd_b = _sd(v), _sd(b)

    unpaired_ok = v.size >= 2 and b.size >= 2 and not (_constant(v) and _constant(b))
    p_student = p_welch = p_paired = math.nan
    with warnings.catch_warnings():
        # scipy warns of "catastrophic cancellation" for a constant group; its variance is
        # exactly 0 (checked by _constant), so the test is well defined and the warning is noise.
        warnings.filterwarnings("ignore", "Precision loss", RuntimeWarning)
        if unpaired_ok:
            p_student = float(sps.ttest_ind(v, b, equal_var=True).pvalue)
            p_welch = float(sps.ttest_ind(v, b, equal_var=False).pvalue)
        if d.size >= 2 and not _constant(d):
            pv, pb = [vmap[s] for s in common], [bmap[s] for s in common]
            p_paired = float(sps.ttest_rel(pv, pb).pvalue)
    g = hedges_g(mean_v, mean_b, sd_v, sd_b, v.size, b.size) if unpaired_ok else math.nan
    lo, hi = _ci(v, b, d, ci, confidence)
    sp = pooled_sd(sd_v, sd_b, v.size, b.size)
    sdd = _sd(d)
    # nan where the test itself is nan (no spread: no test, so no power either).
    mdd = detectable_difference(sp, v.size, alpha, power, n2=b.size) if unpaired_ok else math.nan
    paired_ok = d.size >= 2 and not _constant(d)
    mdd_p = detectable_difference(sdd, d.size, alpha, power, "paired") if paired_ok else math.nan
    return Comparison(
        n_variant=int(v.size),
        n_baseline=int(b.size),
        n_paired=len(common),
        mean_variant=mean_v,
        mean_baseline=mean_b,
        std_variant=sd_v,
        std_baseline=sd_b,
        diff=mean_v - mean_b,
        t_student_p=p_student,
        welch_p=p_welch,
        paired_p=p_paired,
        hedges_g=g,
        ci_low=lo,
        ci_high=hi,
        ci_method=ci,
        confidence=confidence,
        alpha=alpha,
        significant=bool(p_student < alpha),  # nan < alpha is False
        sd_pooled=sp,
        sd_diff=sdd,
        power=power,
        detectable_student=mdd,
        detectable_paired=mdd_p,
    )


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm (1979) step-down adjusted p-values, in the input order and shape.

    With the m finite p-values sorted p_(1) <= ... <= p_(m):
    p~_(i) = min(1, max_{j <= i} (m - j + 1) p_(j)); the running max enforces monotonicity, so
    rejecting H_(i) when p~_(i) <= alpha is exactly Holm's procedure at level alpha.
    nan entries (degenerate tests, i.e. no test performed) are excluded from m and stay nan.
    """
    p = np.asarray(pvalues, dtype=float)
    flat = p.ravel()
    finite = ~np.isnan(flat)
    bad = flat[finite & ((flat < 0) | (flat > 1))]
    if bad.size:
        raise ValueError(f"p-values must lie in [0, 1]; got {bad[0]}")
    out = np.full(flat.shape, np.nan)
    idx = np.flatnonzero(finite)
    m = idx.size
    if m:
        order = idx[np.argsort(flat[idx], kind="stable")]
        scaled = (m - np.arange(m)) * flat[order]
        out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out.reshape(p.shape)


# ------------------------------------------------------------------------------------ power
#
# A two-sided t-test at level alpha rejects when |T| > c, c = t_{1-alpha/2, df}. When the true
# difference is delta, T follows a noncentral t with df and noncentrality lambda = delta / SE:
#   Student, n1 and n2 seeds, per-seed std sigma:  df = n1 + n2 - 2, SE = sigma sqrt(1/n1 + 1/n2)
#   paired, n matched seeds, std of the differences sigma_d:  df = n - 1, SE = sigma_d / sqrt(n)
# and the power is P(|T| > c) = 1 - F_nct(c; df, lambda) + F_nct(-c; df, lambda)
# (Cohen 1988, ch. 2; the exact computation G*Power uses, Faul et al. 2007). Welch's test has
# about the Student power when n1 = n2, the case of every table here.

DESIGNS = ("student", "paired")


def _df_se(n: int, n2: int | None, design: str) -> tuple[int, float]:
    """(df, SE of the difference per unit sigma) of a design."""
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    if design == "paired":
        if n2 is not None:
            raise ValueError("a paired design has one n (the matched seeds); drop n2")
        if n < 2:
            raise ValueError(f"a paired t-test needs n >= 2 pairs, got {n}")
        return n - 1, 1 / math.sqrt(n)
    n2 = n if n2 is None else n2
    if n < 2 or n2 < 2:
        raise ValueError(f"a two-sample t-test needs n >= 2 per group, got {n} and {n2}")
    return n + n2 - 2, math.sqrt(1 / n + 1 / n2)


def _power_nc(lam: float, df: int, alpha: float, direction: int = 0) -> float:
    """Two-sided test's rejection probability at noncentrality ``lam``: either way (direction 0),
    or only with t > c (+1) or t < -c (-1), i.e. finding a difference of that sign."""
    c = float(sps.t.ppf(1 - alpha / 2, df))
    if direction:
        tail = float(sps.nct.sf(c, df, direction * lam))
        return tail if math.isfinite(tail) else 0.0
    lam = abs(lam)  # the two-sided power is symmetric in lambda
    upper = float(sps.nct.sf(c, df, lam))
    lower = float(sps.nct.cdf(-c, df, lam))
    # scipy's nct.cdf returns nan far in the tail; there the term is below Phi(-lambda), nil.
    return upper + (lower if math.isfinite(lower) else 0.0)


def _check_level(alpha: float, power: float | None = None) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if power is not None and not alpha < power < 1:
        raise ValueError(f"power must be in (alpha, 1) = ({alpha}, 1), got {power}")


def t_power(delta: float, sigma: float, n: int, alpha: float = 0.05, design: str = "student",
            n2: int | None = None, direction: int = 0) -> float:
    """Power of the two-sided t-test to detect a true difference ``delta``.

    ``design='student'``: two groups of ``n`` (and ``n2``, default n) seeds, per-seed std
    ``sigma``; ``'paired'``: ``n`` matched seeds, ``sigma`` the std of the per-seed differences.
    ``direction`` +1 / -1: the probability of rejecting *with that sign* (finding a published
    effect the right way round); 0: either sign.
    """
    _check_level(alpha)
    df, se = _df_se(n, n2, design)
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    if direction not in (-1, 0, 1):
        raise ValueError(f"direction must be -1, 0 or 1, got {direction}")
    return _power_nc(delta / (sigma * se), df, alpha, direction)


def detectable_difference(sigma: float, n: int, alpha: float = 0.05, power: float = 0.8,
                          design: str = "student", n2: int | None = None) -> float:
    """Smallest true difference the two-sided t-test detects with probability ``power``.

    delta* = lambda* sigma SE, where lambda* solves power(lambda; df) = ``power`` (Brent's method
    on the exact noncentral-t power, see the comment above). sigma = 0 gives 0; nan gives nan.
    At n = 5 per group, alpha 0.05, power 0.8: delta* = 2.02 sigma (Student), 1.68 sigma_d (paired).
    """
    from scipy.optimize import brentq

    _check_level(alpha, power)
    df, se = _df_se(n, n2, design)
    if math.isnan(sigma):
        return math.nan
    if sigma < 0 or math.isinf(sigma):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma}")
    if sigma == 0:
        return 0.0
    hi = 1.0
    while _power_nc(hi, df, alpha) < power:  # power rises with lambda: bracket, then solve
        hi *= 2
    lam = brentq(lambda x: _power_nc(x, df, alpha) - power, 0.0, hi, xtol=1e-10)
    return lam * se * sigma


def seeds_needed(delta: float, sigma: float, alpha: float = 0.05, power: float = 0.8,
                 design: str = "student", max_n: int = 100_000) -> int:
    """Fewest seeds (per group for 'student', pairs for 'paired') whose two-sided t-test detects a
    true difference ``delta`` with at least ``power``; raises when more than ``max_n`` would do."""
    _check_level(alpha, power)
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    if not (math.isfinite(delta) and math.isfinite(sigma)) or sigma < 0:
        raise ValueError(f"delta and sigma must be finite, sigma >= 0; got {delta}, {sigma}")
    if delta == 0:
        raise ValueError("a zero difference is never detected with power above alpha")
    if sigma == 0:
        return 2

    def enough(n: int) -> bool:
        return t_power(delta, sigma, n, alpha, design) >= power

    lo, hi = 2, 2
    while not enough(hi):  # power rises with n: double, then bisect
        lo, hi = hi + 1, hi * 2
        if hi > max_n:
            if enough(max_n):
                hi = max_n
                break
            raise ValueError(f"a difference of {delta} at sigma {sigma} needs more than {max_n} seeds")
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid + 1, hi)
    return lo


def pooled_sd(sd1: float, sd2: float, n1: int, n2: int) -> float:
    """s_p = sqrt(((n1-1) sd1^2 + (n2-1) sd2^2) / (n1 + n2 - 2)), the Student test's sigma."""
    if n1 < 2 or n2 < 2:
        return math.nan
    return math.sqrt(((n1 - 1) * sd1**2 + (n2 - 1) * sd2**2) / (n1 + n2 - 2))


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson 1934) interval of a binomial proportion k/n, from beta quantiles:
    [B(a/2; k, n-k+1), B(1-a/2; k+1, n-k)], with 0 and 1 at the ends. Valid only for n
    independent trials."""
    if not (0 <= k <= n and n >= 1):
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    a = 1 - confidence
    lo = 0.0 if k == 0 else float(sps.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(sps.beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def sd_interval(sd: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Interval of a normal population's sigma from a sample std of n values:
    [s sqrt((n-1)/chi2_{1-a/2}), s sqrt((n-1)/chi2_{a/2})], df = n - 1."""
    if n < 2 or not math.isfinite(sd):
        return math.nan, math.nan
    a, df = 1 - confidence, n - 1
    return (sd * math.sqrt(df / float(sps.chi2.ppf(1 - a / 2, df))),
            sd * math.sqrt(df / float(sps.chi2.ppf(a / 2, df))))
