"""The statistics of the calibration of the seed tests (``python -m orchestrator.calibrate``).

From per-seed scores of one configuration (MCSE) and a positive control (SimCSE):

* **False positives (A/A).** Two groups of ``group_size`` runs with no seed in common are one
  configuration against itself: every rejection is a false positive. *Disjoint splits* use each
  run once (floor(N / 2g) independent tests), so their rejection count is binomial and gets an
  exact Clopper-Pearson interval. *Resampled splits* draw many random splits of the same N runs;
  the rate is then a U-statistic, an unbiased estimate of the false-positive rate for a fresh pair
  of groups, whose interval comes from a jackknife over runs (leave run i out = keep the draws
  that do not use it; Arvesen 1969). Tests: Student (the papers' '*'), Welch, paired, and
  table-wide ('any * in the table', 'anything significant after Holm').
* **Power on a known effect.** SimCSE vs MCSE on the same seeds, every subset of ``group_size``
  seeds (or random ones) as one small table, beside the noncentral-t prediction.
* **Seeds needed.** Each method's seed std with its chi-square interval, and the seeds per cell a
  true difference of ``deltas`` points needs for 80% power.

Pure NumPy/SciPy: no torch, Ray or MLflow (the ``analysis`` package's rule).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from orchestrator.analysis.stats import (
    clopper_pearson,
    sd_interval,
    seeds_needed,
    t_power,
)
from orchestrator.analysis.tables import DEFAULT_COLUMNS, metric_key

TESTS = ("student", "welch", "paired")
FAMILY = ("family_any_star", "family_holm")
LITERATURE_SDS = (0.15, 0.5, 1.0, 2.0)
"""a range of seed stds spanning the published ones: docs/published-tables.md prints STS Avg stds
from 0.1 to 1.2 over five seeds, and task columns up to 1.7"""
BASELINE, CONTROL = "MCSE", "SimCSE"
DRAWS = 100_000
"""resampled splits per rate: enough that their Monte Carlo noise is small beside the jackknife
SE (with 20 runs, each leave-one-out rate still rests on ~50,000 draws)"""
CHUNK = 20_000


@dataclass(frozen=True)
class Rate:
    """How often a test rejected: over disjoint (independent) splits, and over resampled ones."""

    k: int
    """rejections among the disjoint splits"""
    m: int
    """disjoint splits (independent tests)"""
    ci: tuple[float, float]
    """Clopper-Pearson 95% interval of k/m (nan when m = 0)"""
    resampled: float
    """rejection rate over the resampled splits"""
    resampled_ci: tuple[float, float]
    """rate +- 1.96 jackknife SE over runs, clipped to [0, 1]; nan when no draw leaves a run out
    (the draws use every run) or every draw agrees (the jackknife SE is then 0, not a measure)"""
    draws: int


@dataclass(frozen=True)
class Spread:
    """One method's seed distribution on one metric."""

    method: str
    n: int
    mean: float
    sd: float
    sd_ci: tuple[float, float]
    values: dict[int, float]


@dataclass(frozen=True)
class Control:
    """The positive control: control - baseline on shared seeds, and how often it is found."""

    seeds: tuple[int, ...]
    diff: float
    """mean over shared seeds of control - baseline"""
    sd_diff: float
    """std of the per-seed differences (the paired test's sigma)"""
    sd_pooled: float
    direction: int
    """the published sign of control - baseline (-1: the control is worse)"""
    found: dict[str, Rate]
    """test -> share of group-size subsets where it rejects with the published sign"""
    predicted: dict[str, float]
    """test -> the chance the noncentral t gives of finding it with the published sign, at the
    measured diff and std"""


@dataclass(frozen=True)
class Calibration:
    alpha: float
    power: float
    group_size: int
    metric: str
    family_cells: int
    deltas: tuple[float, ...]
    spreads: dict[str, Spread]
    aa: dict[str, Rate]
    """test -> false-positive rate (TESTS, and FAMILY when enough runs)"""
    control: Control | None
    dropped: dict[str, list[int]] = field(default_factory=dict)
    """method -> seeds left out (a failed run, a missing score)"""
    aa_pvalues: dict[str, list[float]] = field(default_factory=dict)
    """test -> the resampled A/A p-values (a sample, for the plot)"""

    def seeds_for(self, sd: float, design: str = "student") -> dict[float, int | None]:
        out: dict[float, int | None] = {}
        for d in self.deltas:
            try:
                out[d] = seeds_needed(d, sd, self.alpha, self.power, design)
            except ValueError:
                out[d] = None  # nan sd, or beyond max_n
        return out


def pvalues(a: np.ndarray, b: np.ndarray, axis: int = -1,
            tests: Sequence[str] = TESTS) -> dict[str, np.ndarray]:
    """Two-sided Student, Welch and paired t-test p-values of a vs b along ``axis``, vectorised
    (scipy's own tests; a degenerate row, e.g. constant values, gives nan)."""
    a, b = np.broadcast_arrays(np.asarray(a, float), np.asarray(b, float))
    run = {"student": lambda: sps.ttest_ind(a, b, axis=axis),
           "welch": lambda: sps.ttest_ind(a, b, axis=axis, equal_var=False),
           "paired": lambda: sps.ttest_rel(a, b, axis=axis)}
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant rows: nan, counted as no test
        return {t: run[t]().pvalue for t in tests}


def holm_any(p: np.ndarray, alpha: float) -> np.ndarray:
    """Per row of p: does Holm's procedure reject anything at ``alpha``? Holm's first step
    compares the smallest p with alpha / m and stops if it fails, so 'anything rejected' is
    min(p) * m < alpha, m = the finite p-values of the row (nan is no test, as in stats.holm)."""
    p = np.asarray(p, float)
    m = np.sum(np.isfinite(p), axis=-1)
    lo = np.nanmin(np.where(np.isfinite(p), p, np.inf), axis=-1)
    return (m > 0) & (lo * m < alpha)


def draws_of(n: int, size: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` rows of ``size`` distinct indices out of n, each row uniformly random."""
    return np.argsort(rng.random((draws, n)), axis=1)[:, :size]


def disjoint_of(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """floor(n / size) rows of ``size`` indices, no index in two rows (one random permutation)."""
    k = n // size
    return rng.permutation(n)[: k * size].reshape(k, size)


def jackknife_rate(hits: np.ndarray, used: np.ndarray, n: int) -> tuple[float, tuple[float, float]]:
    """Rate of ``hits`` over draws and a 95% interval from a jackknife over the n units: theta_i
    is the rate over the draws that do not use unit i (they are draws from the other n - 1)."""
    rate = float(np.mean(hits)) if hits.size else math.nan
    thetas = []
    for i in range(n):
        keep = ~np.any(used == i, axis=1)
        if keep.any():
            thetas.append(float(np.mean(hits[keep])))
    if len(thetas) < 2:
        return rate, (math.nan, math.nan)
    t = np.array(thetas)
    se = math.sqrt((len(t) - 1) / len(t) * float(np.sum((t - t.mean()) ** 2)))
    if se == 0:  # every draw agrees: a zero SE would claim certainty the runs do not give
        return rate, (math.nan, math.nan)
    return rate, (max(0.0, rate - 1.96 * se), min(1.0, rate + 1.96 * se))


def _rate(disjoint_hits: np.ndarray, hits: np.ndarray, used: np.ndarray, n: int) -> Rate:
    k, m = int(np.sum(disjoint_hits)), int(disjoint_hits.size)
    ci = clopper_pearson(k, m) if m else (math.nan, math.nan)
    r, rci = jackknife_rate(hits, used, n)
    return Rate(k, m, ci, r, rci, int(hits.size))


def aa_rates(values: np.ndarray, group: int, alpha: float, draws: int, rng: np.random.Generator,
             family_cells: int = 0, column: int = -1) -> tuple[dict[str, Rate], dict[str, np.ndarray]]:
    """False-positive rates of one configuration against itself.

    ``values``: (runs, columns) scores of one configuration; ``column`` the one the single tests
    use. Splits are g runs vs g others; a family is 1 + ``family_cells`` disjoint groups of g,
    every cell against the first on every column (the shape of a paper table).
    -> (test -> Rate, test -> resampled p-values).
    """
    n = values.shape[0]
    if n < 2 * group:
        raise ValueError(f"A/A splits need at least {2 * group} runs (2 x group size {group}); got {n}")
    rates, ps = {}, {}

    def split_p(idx: np.ndarray) -> dict[str, np.ndarray]:
        return pvalues(values[idx[:, :group], column], values[idx[:, group:], column])

    d_p, r_idx = split_p(disjoint_of(n, 2 * group, rng)), draws_of(n, 2 * group, draws, rng)
    r_p = split_p(r_idx)
    for t in TESTS:
        rates[t] = _rate(d_p[t] < alpha, r_p[t] < alpha, r_idx, n)
        ps[t] = r_p[t]
    size = (family_cells + 1) * group
    if family_cells and n >= size:
        def family(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            any_star, any_holm = [], []
            for rows in np.array_split(idx, max(1, len(idx) // CHUNK)):  # bounded memory
                g = values[rows].reshape(len(rows), family_cells + 1, group, values.shape[1])
                p = pvalues(g[:, 1:], g[:, :1], axis=2, tests=("student",))["student"]
                p = p.reshape(len(rows), -1)
                any_star.append(np.any(p < alpha, axis=1))
                any_holm.append(holm_any(p, alpha))
            return np.concatenate(any_star), np.concatenate(any_holm)

        d_any, d_holm = family(disjoint_of(n, size, rng))
        f_idx = draws_of(n, size, draws, rng)
        r_any, r_holm = family(f_idx)
        rates["family_any_star"] = _rate(d_any, r_any, f_idx, n)
        rates["family_holm"] = _rate(d_holm, r_holm, f_idx, n)
    return rates, ps


def control_power(control: np.ndarray, baseline: np.ndarray, group: int, alpha: float,
                  direction: int, draws: int, rng: np.random.Generator) -> dict[str, Rate]:
    """Share of ``group``-seed subsets of matched seeds (control[i], baseline[i] share seed i)
    in which each test rejects with the published sign; every subset when there are at most
    ``draws`` of them, else ``draws`` random ones."""
    k = len(control)
    if k < group:
        raise ValueError(f"the positive control needs at least {group} shared seeds; got {k}")
    if math.comb(k, group) <= draws:
        idx = np.array(list(itertools.combinations(range(k), group)))
    else:
        idx = draws_of(k, group, draws, rng)
    d_idx = disjoint_of(k, group, rng)

    def hits(rows: np.ndarray) -> dict[str, np.ndarray]:
        a, b = control[rows], baseline[rows]
        right = np.sign(np.mean(a - b, axis=1)) == direction
        return {t: (p < alpha) & right for t, p in pvalues(a, b).items()}

    h, dh = hits(idx), hits(d_idx)
    return {t: _rate(dh[t], h[t], idx, k) for t in TESTS}


def _scores(per_seed: Mapping[int, Mapping[str, float]], columns: Sequence[str]
            ) -> tuple[dict[int, np.ndarray], list[int]]:
    """seed -> the row of ``columns`` (Avg filled from the seven tasks if absent); seeds with a
    missing or non-finite score are returned apart."""
    rows, dropped = {}, []
    for seed, metrics in sorted(per_seed.items()):
        m = {metric_key(k): v for k, v in metrics.items()}
        tasks = [t for t in DEFAULT_COLUMNS if t != "avg"]
        if "avg" not in m and all(t in m for t in tasks):
            m["avg"] = sum(float(m[t]) for t in tasks) / len(tasks)
        try:
            row = np.array([float(m[c]) for c in columns])
        except (KeyError, TypeError, ValueError):
            dropped.append(seed)
            continue
        if np.all(np.isfinite(row)):
            rows[seed] = row
        else:
            dropped.append(seed)
    return rows, dropped


def calibrate(results: Mapping[str, Mapping[int, Mapping[str, float]]], *, group_size: int = 5,
              alpha: float = 0.05, power: float = 0.8, draws: int = DRAWS, family_cells: int = 3,
              deltas: Sequence[float] = (0.4, 0.8, 1.3), direction: int = -1, metric: str = "avg",
              seed: int = 0) -> Calibration:
    """The calibration from per-seed scores: ``results[method][seed][metric]`` for MCSE (the
    A/A pool) and optionally SimCSE (the positive control, on seeds shared with MCSE).
    ``direction``: the published sign of SimCSE - MCSE. Deterministic for a given ``seed``."""
    rng = np.random.default_rng(seed)
    columns = list(DEFAULT_COLUMNS)
    col = columns.index(metric_key(metric))
    rows, dropped = {}, {}
    order = [m for m in (BASELINE, CONTROL) if m in results] + \
        [m for m in results if m not in (BASELINE, CONTROL)]  # the baseline first, always
    for method in order:
        rows[method], dropped[method] = _scores(results[method], columns)
    spreads = {}
    for method, r in rows.items():
        vals = {s: float(v[col]) for s, v in r.items()}
        x = np.array(list(vals.values()))
        sd = float(np.std(x, ddof=1)) if x.size >= 2 else math.nan
        spreads[method] = Spread(method, int(x.size), float(x.mean()) if x.size else math.nan, sd,
                                 sd_interval(sd, x.size), vals)
    base = np.array(list(rows.get(BASELINE, {}).values())).reshape(-1, len(columns))
    aa, ps = aa_rates(base, group_size, alpha, draws, rng, family_cells, col)
    control = None
    shared = sorted(set(rows.get(CONTROL, {})) & set(rows.get(BASELINE, {})))
    if len(shared) >= group_size:
        c = np.array([rows[CONTROL][s][col] for s in shared])
        b = np.array([rows[BASELINE][s][col] for s in shared])
        found = control_power(c, b, group_size, alpha, direction, draws, rng)
        diff, sdd = float(np.mean(c - b)), float(np.std(c - b, ddof=1))
        sp = math.sqrt((np.var(c, ddof=1) + np.var(b, ddof=1)) / 2)
        # The chance of finding it with the published sign, at the measured values.
        predicted = {
            "student": t_power(diff, sp, group_size, alpha, direction=direction) if sp > 0 else math.nan,
            "paired": (t_power(diff, sdd, group_size, alpha, "paired", direction=direction)
                       if sdd > 0 else math.nan),
        }
        control = Control(tuple(shared), diff, sdd, sp, direction, found, predicted)
    sample = {t: [float(v) for v in p[:2000]] for t, p in ps.items()}
    return Calibration(alpha, power, group_size, metric_key(metric), family_cells, tuple(deltas),
                       spreads, aa, control, {k: v for k, v in dropped.items() if v}, sample)
