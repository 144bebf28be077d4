"""Calibration of the seed tests: would a table see an effect that is there, and invent none?

    python -m orchestrator.calibrate                       # demo: 20 MCSE + 10 SimCSE runs
    python -m orchestrator.calibrate --runs 40 --control-runs 10
    python -m orchestrator.calibrate --dry-run             # the runs and arrays, nothing started
    python -m orchestrator.calibrate --resume              # finish the runs, recompute

It trains one configuration (MCSE, the baseline of every table) on ``--runs`` seeds and the
positive control (text-only SimCSE, which the papers put 2 points below MCSE) on the first
``--control-runs`` of those seeds, through the campaign runner: one MLflow parent, one child per
run, arrays packed as for a table. From the finished runs' scores (STS Avg unless said otherwise):

* **False positives (A/A).** Two groups of ``--group-size`` MCSE runs with no seed in common are
  one configuration against itself: every rejection is a false positive. *Disjoint splits* use
  each run once (floor(N / 2g) independent tests), so their rejection count is binomial and gets an
  exact Clopper-Pearson interval, wide for small N. *Resampled splits* draw ``--draws`` random
  splits of the same N runs; the rate is then a U-statistic, an unbiased estimate of the
  false-positive rate for a fresh pair of groups, but the draws share runs, so a binomial
  interval over them would be far too narrow. Its interval comes from a jackknife over runs
  (leave run i out = keep the draws that do not use it; Arvesen 1969 for U-statistics).
  Tests: Student (the papers' '*'), Welch, paired (the groups are paired by position: an arbitrary
  pairing, as in the negative control), and table-wide: a baseline and ``--family-cells`` cells,
  all MCSE, on all 8 columns, where 'any * in the table' and 'anything significant after Holm'
  are the family-wise error rates of the unadjusted and the Holm-adjusted report.
* **Power on a known effect.** SimCSE vs MCSE on the same seeds, every subset of
  ``--group-size`` seeds (or ``--draws`` random ones) as one small table: the share of subsets in
  which each test finds MCSE better (p < alpha, right sign); jackknife over seeds as above;
  beside it the chance the noncentral t gives of finding it that way round at the measured
  difference and std.
* **Seeds needed.** Each method's seed std of the STS average (with its chi-square interval), and
  from it the seeds per cell a true difference of ``--deltas`` points needs for 80% power
  (``orchestrator.stats.seeds_needed``), beside a range of seed stds spanning the published ones.

The report (calibration.md, calibration.json, calibration.png) goes beside the MLflow store and
onto the parent run, with headline metrics; the printed report also holds the positive control
as a table on its seeds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from orchestrator import cli
from orchestrator.stats import (
    clopper_pearson,
    detectable_difference,
    sd_interval,
    seeds_needed,
    t_power,
)
from orchestrator.tables import DEFAULT_COLUMNS, label, metric_key

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


# ------------------------------------------------------------------------------- the numbers


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


# ------------------------------------------------------------------------------- the report


def _cells(n: int) -> str:
    return f"{n} cell{'s' * (n != 1)}"


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f}%"


def _interval(ci: tuple[float, float]) -> str:
    return "n/a" if math.isnan(ci[0]) else f"{_pct(ci[0])} to {_pct(ci[1])}"


TEST_NAMES = {
    "student": "Student t (the papers' *)", "welch": "Welch t", "paired": "paired t",
    "family_any_star": "any * in a table (unadjusted)",
    "family_holm": "anything significant after Holm",
}


def _best_interval(r: Rate) -> tuple[tuple[float, float], str]:
    """The jackknife interval when there is one, else the disjoint splits' exact one."""
    if not math.isnan(r.resampled_ci[0]):
        return r.resampled_ci, "jackknife"
    return r.ci, f"exact, {r.m} disjoint split{'s' * (r.m != 1)}"


def _verdict(r: Rate, alpha: float, family: bool = False) -> str:
    (lo, hi), _ = _best_interval(r)
    if math.isnan(lo):
        return "not enough runs to judge"
    if lo > alpha:
        return f"ABOVE the nominal {_pct(alpha)}: this test invents effects"
    if hi - lo > 0.5:
        return "too few independent splits to judge; run more seeds (--runs)"
    if family:
        return f"consistent with Holm's guarantee of at most {_pct(alpha)}"
    if hi < alpha:
        return f"below the nominal {_pct(alpha)} (conservative)"
    return f"consistent with the nominal {_pct(alpha)}"


def to_markdown(cal: Calibration, runs_line: str = "") -> str:
    g, a = cal.group_size, cal.alpha
    base = cal.spreads.get(BASELINE)
    out = ["## Calibration of the seed tests", ""]
    if runs_line:
        out += [runs_line, ""]
    out += [f"Metric: {label(cal.metric)} (Spearman x 100). A table cell has g = {g} seeds; "
            f"alpha = {a}; target power {cal.power:.0%}.", "", "### Verdict", ""]
    def stated(r: Rate) -> str:
        ci, how = _best_interval(r)
        return f"{_pct(r.resampled)} (95% interval {_interval(ci)}, {how})"

    for t in TESTS:
        out.append(f"- False positives, {TEST_NAMES[t]}: {stated(cal.aa[t])}, "
                   f"{_verdict(cal.aa[t], a)}.")
    for t in FAMILY:
        if t in cal.aa:
            r = cal.aa[t]
            out.append(f"- Table-wide ({_cells(cal.family_cells)} x {len(DEFAULT_COLUMNS)} columns, "
                       f"all one configuration), {TEST_NAMES[t]}: {stated(r)}"
                       + (f", {_verdict(r, a, family=True)}." if t == "family_holm" else "."))
    c = cal.control
    if c is not None:
        word = "below" if c.direction < 0 else "above"
        out.append(f"- Known effect: {CONTROL} − {BASELINE} = {c.diff:+.2f} over {len(c.seeds)} "
                   f"shared seeds (published: {CONTROL} {word} {BASELINE}). Found in "
                   f"{stated(c.found['paired'])} of {g}-seed tables by the paired test, "
                   f"{stated(c.found['student'])} by Student's.")
    else:
        out.append(f"- Known effect: not measured (fewer than {g} {CONTROL} runs share a seed with "
                   f"{BASELINE}).")
    if base is not None and math.isfinite(base.sd):
        need = cal.seeds_for(base.sd)
        out.append(f"- Seed std of {BASELINE}: {base.sd:.2f} (95% interval {base.sd_ci[0]:.2f} to "
                   f"{base.sd_ci[1]:.2f}); at that std a true difference of "
                   + ", ".join(f"{d:g} needs {n if n else '>100000'}" for d, n in need.items())
                   + f" seeds per cell (Student, {cal.power:.0%} power); {g} seeds detect "
                   f"{detectable_difference(base.sd, g, a, cal.power):.2f}.")

    out += ["", f"### Seed spread ({label(cal.metric)})", "",
            "| method | runs | mean | seed std | 95% interval of the std | min | max |",
            "|---" * 7 + "|"]
    for s in cal.spreads.values():
        v = list(s.values.values()) or [math.nan]
        out.append(f"| {s.method} | {s.n} | {s.mean:.2f} | {s.sd:.3f} | {s.sd_ci[0]:.3f} to "
                   f"{s.sd_ci[1]:.3f} | {min(v):.2f} | {max(v):.2f} |")
    for method, seeds in cal.dropped.items():
        out.append(f"\n{method}: seeds {seeds} left out (failed run or missing score).")

    out += ["", f"### False positives: {BASELINE} against itself (A/A)", "",
            f"Two groups of {g} {BASELINE} runs with no seed in common: every rejection at p < {a} "
            "is false. *Disjoint splits* use each run once, so they are independent tests and "
            "their count has an exact (Clopper-Pearson) interval, wide with few runs. *Resampled "
            "splits* draw many splits from the same runs: the rate is an unbiased estimate for a "
            "fresh pair of groups, but the draws share runs, so its interval is a jackknife over "
            "runs, not a binomial one over draws; it is n/a when every draw uses every run or every "
            "draw agrees (then the exact interval is the one to read). The paired test pairs the "
            "groups by position "
            "(an arbitrary pairing). Table-wide rows draw a baseline and "
            f"{_cells(cal.family_cells)} of {g} runs each and test all of them on every column.", "",
            "| test | disjoint: rejections / splits | exact 95% CI | resampled rate | "
            "jackknife 95% interval | draws |", "|---" * 6 + "|"]
    for t, r in cal.aa.items():
        out.append(f"| {TEST_NAMES[t]} | {r.k} / {r.m} | {_interval(r.ci)} | {_pct(r.resampled)} | "
                   f"{_interval(r.resampled_ci)} | {r.draws} |")
    if not any(t in cal.aa for t in FAMILY):
        out.append(f"\nTable-wide rates need {(cal.family_cells + 1) * g} {BASELINE} runs.")

    if c is not None:
        out += ["", f"### Power on a known effect: {CONTROL} vs {BASELINE}", "",
                f"Every {g}-seed subset of the {len(c.seeds)} shared seeds is one small table; "
                f"'found' = p < {a} with the published sign. Measured: Δ = {c.diff:+.3f}, std of "
                f"per-seed differences {c.sd_diff:.3f}, pooled seed std {c.sd_pooled:.3f}. "
                "'Predicted' is the noncentral-t chance of finding it with the published sign at "
                "those measured values.", "",
                "| test | found in (disjoint) | exact 95% CI | found in (all subsets) | "
                "jackknife 95% interval | subsets | predicted |", "|---" * 7 + "|"]
        for t, r in c.found.items():
            pred = c.predicted.get(t)
            out.append(f"| {TEST_NAMES[t]} | {r.k} / {r.m} | {_interval(r.ci)} | "
                       f"{_pct(r.resampled)} | {_interval(r.resampled_ci)} | {r.draws} | "
                       f"{'—' if pred is None else _pct(pred)} |")

    ds = " | ".join(f"Δ = {d:g}" for d in cal.deltas)
    out += ["", f"### Seeds per cell for {cal.power:.0%} power (two-sided, alpha {a})", "",
            f"| sigma from | sigma | detectable with {g} seeds | {ds} |",
            "|---" * (3 + len(cal.deltas)) + "|"]

    def row(name: str, sd: float, design: str = "student") -> str:
        if not math.isfinite(sd) or sd <= 0:
            return f"| {name} | n/a | n/a |" + " n/a |" * len(cal.deltas)
        need = cal.seeds_for(sd, design)
        mdd = detectable_difference(sd, g, a, cal.power, design)
        return (f"| {name} | {sd:.3f} | {mdd:.2f} | "
                + " | ".join(str(n) if n else ">100000" for n in need.values()) + " |")

    for s in cal.spreads.values():
        out.append(row(f"{s.method} seed std ({s.n} runs)", s.sd))
        if s.method == BASELINE and math.isfinite(s.sd_ci[0]):
            out.append(row(f"{s.method}, low end of its 95% interval", s.sd_ci[0]))
            out.append(row(f"{s.method}, high end of its 95% interval", s.sd_ci[1]))
    if c is not None:
        out.append(row(f"paired: std of {CONTROL} − {BASELINE} per seed", c.sd_diff, "paired"))
    for sd in LITERATURE_SDS:
        out.append(row("a seed std in the published range", sd))
    out += ["", "Student rows: seeds per cell (two independent groups). The paired row: matched "
            "seeds, from the control's per-seed differences; another pair of methods may "
            "correlate more or less across seeds. The gaps these papers report between a method "
            "and its neighbour or ablation are mostly 0.3 to 1.3 points, their Avg seed stds 0.1 "
            "to 1.2 (docs/published-tables.md)."]
    return "\n".join(out) + "\n"


def to_json(cal: Calibration) -> str:
    return json.dumps(asdict(cal), indent=1, default=float)


def headline_metrics(cal: Calibration) -> dict[str, float]:
    """What the parent run shows in MLflow's run list."""
    out = {f"calib/fpr_{t}": r.resampled for t, r in cal.aa.items()}
    for m, s in cal.spreads.items():
        out[f"calib/sd_{m}"] = s.sd
    if cal.control is not None:
        out.update({f"calib/power_{t}": r.resampled for t, r in cal.control.found.items()})
        out["calib/control_diff"] = cal.control.diff
    base = cal.spreads.get(BASELINE)
    if base is not None:
        for d, n in cal.seeds_for(base.sd).items():
            if n:
                out[f"calib/seeds_for_{d:g}"] = float(n)
    return {k: v for k, v in out.items() if math.isfinite(v)}


# ------------------------------------------------------------------------------- the command


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.calibrate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20,
                   help="MCSE runs (seeds first-seed..): the A/A pool (default 20)")
    p.add_argument("--control-runs", type=int, default=10,
                   help="SimCSE runs on the first of those seeds: the positive control (default 10; "
                        "0 skips it)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--group-size", type=int, default=5, help="seeds per cell of a table (default 5)")
    p.add_argument("--family-cells", type=int, default=3,
                   help="cells besides the baseline in a table-wide A/A family (default 3, Table 3)")
    p.add_argument("--draws", type=int, default=DRAWS,
                   help=f"resampled splits per rate (default {DRAWS:,})")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--deltas", type=float, nargs="+", default=[0.4, 0.8, 1.3],
                   help="true differences (points) to size seeds for (default: the published gaps)")
    cli.add_campaign_args(p)
    args = p.parse_args(argv)
    return cli.guarded(lambda: _run(args))


def _check(args: argparse.Namespace) -> None:
    g = args.group_size
    if g < 2:
        raise ValueError(f"--group-size {g} must be >= 2 (a t-test needs two seeds per group)")
    if args.runs < 2 * g:
        raise ValueError(f"--runs {args.runs} must be >= {2 * g} (two disjoint groups of "
                         f"--group-size {g})")
    if args.control_runs and not g <= args.control_runs <= args.runs:
        raise ValueError(f"--control-runs {args.control_runs} must be 0 or between --group-size "
                         f"{g} and --runs {args.runs} (it reuses MCSE's seeds)")
    if args.draws < 100:
        raise ValueError(f"--draws {args.draws} must be >= 100")
    if not 0 < args.alpha < 1 or args.family_cells < 0 or any(d <= 0 for d in args.deltas):
        raise ValueError("--alpha must be in (0, 1), --family-cells >= 0, --deltas > 0")


def _run(args: argparse.Namespace) -> int:
    from orchestrator.campaign import Campaign, Session, describe, dry_run_arrays
    from orchestrator.plan import plan_id, plan_members
    from orchestrator.preflight import check_campaign
    from orchestrator.registry import load_grid
    from orchestrator.report import grid_spec, report_dir
    from trainables.profiles import build_config, profile_overrides

    _check(args)
    opts = cli.options(args)
    grid = load_grid("control_positive")
    profile_name, prof = profile_overrides(opts.profile)
    seeds = list(range(args.first_seed, args.first_seed + args.runs))
    ctrl = set(seeds[: args.control_runs])
    members = [m for m in plan_members(grid, lambda ov: build_config(opts.profile, overrides=ov), seeds)
               if m.cell == BASELINE or m.seed in ctrl]
    pre = check_campaign(members, opts)  # everything, before Ray or MLflow
    array_keys = pre.array_keys
    demo = bool(prof.get("data.demo"))
    spec = grid_spec(grid) | {"name": "calibration", "seeds": sorted(ctrl) or seeds[: args.group_size],
                              "cells": [BASELINE, CONTROL] if ctrl else [BASELINE], "demo": demo}
    pub = grid.published
    direction = int(np.sign(pub[CONTROL]["avg"] - pub[BASELINE]["avg"]))
    settings = [args.runs, args.control_runs, args.first_seed]
    pid = plan_id("calibration", grid.name, members, profile_name, *settings)
    kind = "demo" if demo else profile_name
    runs_line = (f"{args.runs} {BASELINE} runs (seeds {seeds[0]}-{seeds[-1]})"
                 + (f" and {len(ctrl)} {CONTROL} runs on the first {len(ctrl)} of those seeds"
                    if ctrl else "") + f", profile {kind}.")
    if args.dry_run:
        trials, slots = dry_run_arrays(members, array_keys, "calibration", opts)
        print(f"calibration: {runs_line}\n{len(members)} runs in {len(trials)} arrays, up to "
              f"{slots} at once")
        print(describe(trials))
        print("\n".join(f"checked: {line}" for line in pre.checked))
        print("dry run: everything checked, nothing started")
        return 0
    campaign = Campaign("calibration", "calibration", f"calibration ({kind})", pid,
                        tuple(members), spec, {"mmemb.grid": "calibration",
                                               "mmemb.profile": opts.profile or "default"})
    s = Session(campaign, opts, array_keys)
    if not s.resumed:
        s.tracker.log_artifact_text(s.parent, "grid.json", json.dumps(spec, indent=1))
    print(f"calibration: {runs_line}\nMLflow parent run {s.parent} at {s.tracker.uri}", flush=True)
    out = s.run(members, f"calibration-{pid}")
    if out.interrupted:
        return s.interrupted()
    ok, _ = s.tracker.scores(s.parent)
    try:
        cal = calibrate(ok, group_size=args.group_size, alpha=args.alpha, draws=args.draws,
                        family_cells=args.family_cells, deltas=args.deltas, direction=direction)
    except ValueError as e:  # too many failed runs: say so, and still end the parent properly
        print(f"error: no calibration: {e}", file=sys.stderr)
        s.finish(spec)
        return 1
    # Runs that never finished are missing from the scores: list them beside the broken ones.
    expected = {BASELINE: seeds, CONTROL: sorted(ctrl)}
    dropped = {m: sorted(set(cal.dropped.get(m, [])) | (set(want) - set(ok.get(m, {}))))
               for m, want in expected.items()}
    cal = replace(cal, dropped={m: v for m, v in dropped.items() if v})
    md = to_markdown(cal, runs_line)
    outdir = report_dir(s.tracker, "calibration", s.parent)
    write_files(cal, md, outdir)
    try:
        for name in ("calibration.md", "calibration.json", "calibration.png"):
            s.tracker.log_artifact_file(s.parent, outdir / name)
        _log_metrics(s.tracker, s.parent, headline_metrics(cal))
    except Exception as e:  # the files on disk and the printed report do not depend on MLflow
        print(f"error: could not store the calibration in MLflow ({type(e).__name__}: {e}); it is "
              f"in {outdir}", file=sys.stderr)
    rc = s.finish(spec, extra_md="\n" + md)
    print(f"calibration: {outdir}/calibration.md")
    return rc


def write_files(cal: Calibration, md: str, outdir: Path) -> None:
    from orchestrator.plots import calibration_figure, save_png

    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "calibration.md").write_text(md)
    (outdir / "calibration.json").write_text(to_json(cal))
    save_png(calibration_figure(cal), outdir / "calibration.png")


def _log_metrics(tracker: Any, parent: str, metrics: Mapping[str, float]) -> None:
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    tracker.client.log_batch(parent, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()])


if __name__ == "__main__":
    cli.quiet_env()
    sys.exit(main())
