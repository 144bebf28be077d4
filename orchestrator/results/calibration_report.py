"""The calibration's report: Markdown, JSON and the figure, beside the store and on the parent.

The numbers come from ``orchestrator.analysis.calibration``; this module only words and files them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from orchestrator.analysis.calibration import (
    BASELINE,
    CONTROL,
    FAMILY,
    LITERATURE_SDS,
    TESTS,
    Calibration,
    Rate,
)
from orchestrator.analysis.stats import detectable_difference
from orchestrator.analysis.tables import DEFAULT_COLUMNS, label


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


def write_files(cal: Calibration, md: str, outdir: Path) -> None:
    from orchestrator.analysis.plots import calibration_figure, save_png

    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "calibration.md").write_text(md)
    (outdir / "calibration.json").write_text(to_json(cal))
    save_png(calibration_figure(cal), outdir / "calibration.png")


def log_metrics(tracker: Any, parent: str, metrics: Mapping[str, float]) -> None:
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    tracker.client.log_batch(parent, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()])
