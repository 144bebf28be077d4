"""The PNGs: a paper table (the full scale beside the differences to the baseline), and the
calibration of the seed tests (``orchestrator.calibrate``).

Two panels, so no axis exaggerates a gap (issue 13: an axis starting at 89.7 made 0.3 points look
large):

* left, the scores on a zero-based axis: a bar (bars) or a line (sweep) per cell, mean ± std, and
  every seed as a point beside its mean;
* right, ours − baseline in points, on an axis that always includes 0: each seed's difference to
  the baseline's same seed, the mean difference with its 95% CI, a grey band of ± one baseline
  seed std (the noise a single run carries) and, per cell, the smallest difference the seeds could
  detect at 80% power (dotted). Published differences (the paper's cell − its baseline) are
  diamonds; published *values* are drawn on the left only outside the demo, where they are
  comparable.

matplotlib's Agg canvas only (no pyplot state), so plots render in Ray workers and CI alike.
"""

from __future__ import annotations

import math
import os
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.analysis.tables import TableAnalysis, label, metric_key

SEED_DOT = dict(s=14, color="k", alpha=0.55, zorder=4, linewidths=0)


def to_png(
    a: TableAnalysis,
    path: str | Path,
    kind: str = "bars",
    x: Mapping[str, float] | Sequence[float] | None = None,
    xlabel: str | None = None,
    metric: str = "avg",
) -> Path:
    """Plot one column (Avg by default) and write a PNG atomically (see :func:`table_figure`)."""
    if not Path(path).parent.is_dir():  # before drawing: a bad path fails fast
        raise FileNotFoundError(f"cannot write {path}: directory {Path(path).parent} does not exist; create it")
    return save_png(table_figure(a, kind, x, xlabel, metric), path)


def table_figure(
    a: TableAnalysis,
    kind: str = "bars",
    x: Mapping[str, float] | Sequence[float] | None = None,
    xlabel: str | None = None,
    metric: str = "avg",
) -> Any:
    """The two-panel figure of one column (a matplotlib Figure on the Agg canvas).

    kind='bars': one bar per cell; kind='sweep': the cells as a line over ``x`` (a mapping
    cell -> x, or a sequence in non-baseline cell order; the baseline may have one too).
    Incomplete cells are drawn as labelled gaps, never as values. '*' marks the papers' test
    (Student, unadjusted) as in the table.
    """
    m = metric_key(metric)
    if m not in a.columns:
        raise ValueError(f"metric {metric!r} is not a table column {a.columns}")
    if kind not in ("bars", "sweep"):
        raise ValueError(f"kind must be 'bars' or 'sweep', got {kind!r}")
    xs = _positions(a, kind, x)
    # The right panel has no baseline bar (it is the zero line): bars close up there.
    xd = ({c: float(i) for i, c in enumerate(c for c in xs if c != a.baseline)}
          if kind == "bars" else {c: v for c, v in xs.items() if c != a.baseline})
    width = min(18.0, max(10.0, 1.1 * (2 * len(xs) - 1) + 4)) if kind == "bars" else 12.0
    fig = _figure(width=width, height=5.2)
    # Bars: panel widths follow their bar counts, but a one-cell table's right panel keeps room
    # for its title and labels.
    ratios = (len(xs), max(1.0, len(xd), 0.75 * len(xs)))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": ratios} if kind == "bars" else None)
    _scores(left, a, m, xs, kind)
    _differences(right, a, m, xd, kind)
    for ax, pos in ((left, xs), (right, xd)):
        if kind == "bars":
            ax.set_xticks(list(pos.values()), list(pos), rotation=25, ha="right")
            ax.set_xlim(-0.6, len(pos) - 0.4)
        else:
            ax.set_xlabel(xlabel or "")
        ax.grid(axis="y", alpha=0.3)
    title = f"{a.title} — {label(m)}" if a.title else label(m)
    _suptitle(fig, title)
    handles = {}
    for ax in (left, right):
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center",
               ncols=min(4, len(handles)), fontsize=8, frameon=False)
    return fig


def _positions(a: TableAnalysis, kind: str, x: Any) -> dict[str, float]:
    if kind == "bars":
        return {c: float(i) for i, c in enumerate(a.cells)}
    cells = list(a.cells[1:])
    if x is None:
        raise ValueError("kind='sweep' needs x: a mapping cell -> x value, or one per cell")
    xmap = dict(x) if isinstance(x, Mapping) else dict(zip(cells, x, strict=True))
    if not set(cells) <= set(xmap) <= set(a.cells):
        raise ValueError(
            f"x must give a value for each non-baseline cell {cells} (the baseline's is "
            f"optional), got {sorted(xmap)}"
        )
    return dict(sorted(((c, float(xmap[c])) for c in a.cells if c in xmap), key=lambda kv: kv[1]))


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _suptitle(fig: Any, title: str, fontsize: float = 12) -> None:
    # Wrap to the figure's width (about 0.6 em per character) so no title is clipped.
    chars = max(20, int(fig.get_figwidth() * 72 / (0.6 * fontsize)))
    fig.suptitle("\n".join(textwrap.wrap(title, chars)), fontsize=fontsize)


def _spread(x: float, n: int, width: float) -> list[float]:
    """n positions evenly over [x - width/2, x + width/2]: seeds side by side, not on top."""
    if n <= 1:
        return [x]
    return [x - width / 2 + width * i / (n - 1) for i in range(n)]


def _scores(ax: Any, a: TableAnalysis, m: str, xs: Mapping[str, float], kind: str) -> None:
    """Left panel: the scores on a zero-based axis, each seed beside its mean."""
    ent = {c: a.entries[(c, m)] for c in a.cells}
    ok = [c for c in xs if a.status[c].complete]
    step = _step(xs)
    if kind == "bars":
        ax.bar([xs[c] for c in ok], [ent[c].mean for c in ok], width=0.5,
               yerr=[_finite(ent[c].std) for c in ok], capsize=4,
               color=["0.6" if c == a.baseline else "tab:blue" for c in ok],
               label=f"mean ± std (n={len(a.seeds)})")
        dots = {c: _spread(xs[c] + 0.36, len(ent[c].values), 0.14) for c in ok}
    else:
        line = list(xs)
        ax.errorbar([xs[c] for c in line], [ent[c].mean if c in ok else math.nan for c in line],
                    yerr=[_finite(ent[c].std) if c in ok else math.nan for c in line], fmt="o-",
                    color="tab:blue", capsize=3, label=f"mean ± std (n={len(a.seeds)})")
        dots = {c: _spread(xs[c], len(ent[c].values), 0.25 * step) for c in ok}
    first = True
    for c in ok:
        ax.scatter(dots[c], list(ent[c].values.values()), label="one seed" if first else None,
                   **SEED_DOT)
        first = False
    if a.status[a.baseline].complete:
        ax.axhline(ent[a.baseline].mean, ls="--", color="0.3", lw=1,
                   label=f"baseline mean ({a.baseline})")
    pubs = [c for c in xs if ent[c].published is not None] if not a.directions_only else []
    if pubs:
        ax.scatter([xs[c] for c in pubs], [ent[c].published for c in pubs], marker="D",
                   color="k", zorder=5, label="published value")
    ys = [v for c in ok for v in ent[c].values.values()] + [ent[c].published for c in pubs]
    top = max([*ys, 1.0])
    bottom = min([*ys, 0.0])
    ax.set_ylim(bottom - 0.02 * (top - bottom), top + 0.12 * (top - bottom))
    for c in xs:
        if not a.status[c].complete:
            ax.annotate("INCOMPLETE", (xs[c], 0), rotation=90, ha="center", va="bottom",
                        color="tab:red")
    ax.set_ylabel(f"{label(m)} (full scale from 0)")
    ax.set_title("scores\nmean ± std and each seed", fontsize=10)


def _differences(ax: Any, a: TableAnalysis, m: str, xs: Mapping[str, float], kind: str) -> None:
    """Right panel: ours − baseline, each seed, the mean with its CI, noise and detectable bands."""
    base = a.entries[(a.baseline, m)]
    cells = list(xs)
    step = _step(xs)
    ys: list[float] = [0.0]
    if a.status[a.baseline].complete and math.isfinite(base.std):
        ax.axhspan(-base.std, base.std, color="0.5", alpha=0.18, lw=0,
                   label=f"± 1 seed std of {a.baseline}")
        ys += [-base.std, base.std]
    ax.axhline(0, color="0.3", lw=1)
    labels = {"seed": "one seed − the baseline's same seed", "ci": "mean Δ, 95% CI",
              "mdd": "smallest Δ detectable at 80% power", "pub": "published Δ (paper's setting)"}
    half = (0.3 if kind == "bars" else 0.3 * step)
    for c in cells:
        e, x0 = a.entries[(c, m)], xs[c]
        if e.published_diff is not None:
            ax.scatter([x0 + half * 0.9], [e.published_diff], marker="D", color="k", zorder=5,
                       label=labels.pop("pub", None))
            ys.append(e.published_diff)
        cmp = e.comparison
        if cmp is None:
            ax.annotate("INCOMPLETE", (x0, 0), rotation=90, ha="center", va="bottom",
                        color="tab:red")
            continue
        per_seed = [v - base.values[s] for s, v in e.values.items() if s in base.values]
        ax.scatter(_spread(x0 - half * 0.6, len(per_seed), half * 0.5), per_seed,
                   label=labels.pop("seed", None), **SEED_DOT)
        lo, hi = cmp.ci_low, cmp.ci_high
        err = [[cmp.diff - lo], [hi - cmp.diff]] if math.isfinite(lo) else None
        ax.errorbar([x0], [cmp.diff], yerr=err, fmt="o", color="tab:blue", capsize=4, zorder=6,
                    label=labels.pop("ci", None))
        mdd = cmp.detectable_student
        if math.isfinite(mdd):
            for sgn in (-1, 1):
                ax.hlines(sgn * mdd, x0 - half, x0 + half, colors="tab:orange", linestyles=":",
                          lw=1.6, label=labels.pop("mdd", None) if sgn == 1 else None)
            ys += [-mdd, mdd]
        ys += per_seed + [v for v in (lo, hi) if math.isfinite(v)]
        if cmp.significant:
            ax.annotate("*", (x0, max([hi, *per_seed]) if math.isfinite(hi) else max(per_seed)),
                        ha="center", va="bottom", fontsize=14)
    span = (max(ys) - min(ys)) or 1.0
    ax.set_ylim(min(ys) - 0.08 * span, max(ys) + 0.15 * span)
    ax.set_ylabel(f"{label(m)}: ours − {a.baseline} (points)")
    ax.set_title(f"difference to {a.baseline}\n* Student t p < {a.alpha}, unadjusted", fontsize=10)


def _step(xs: Mapping[str, float]) -> float:
    v = sorted(set(xs.values()))
    return min((b - a for a, b in zip(v, v[1:], strict=False)), default=1.0) or 1.0


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def calibration_figure(cal: Any) -> Any:
    """Four panels of an ``orchestrator.analysis.calibration.Calibration``: the seeds per method, the A/A
    p-values (uniform if the test is calibrated), the false-positive rates with their intervals,
    and the power at the table's seed count against the true difference."""
    from orchestrator.analysis.stats import t_power

    fig = _figure(12.0, 8.6)
    (seeds_ax, p_ax), (fpr_ax, pow_ax) = fig.subplots(2, 2)
    g, alpha = cal.group_size, cal.alpha
    _suptitle(fig, f"Calibration of the seed tests: {label(cal.metric)}, {g} seeds per cell, "
                   f"alpha {alpha}")

    # Seeds: each run a point; a control run joined to the baseline run of the same seed.
    names = list(cal.spreads)
    where: dict[tuple[str, int], tuple[float, float]] = {}
    for i, name in enumerate(names):
        sp = cal.spreads[name]
        xs = _spread(float(i), len(sp.values), 0.3)
        where.update({(name, s): (x, y) for x, (s, y) in zip(xs, sp.values.items(), strict=True)})
        seeds_ax.scatter(xs, list(sp.values.values()), **SEED_DOT)
        if math.isfinite(sp.sd):
            seeds_ax.errorbar([i + 0.3], [sp.mean], yerr=[sp.sd], fmt="o", color="tab:blue",
                              capsize=4)
            seeds_ax.annotate(f"std {sp.sd:.2f}", (i + 0.34, sp.mean), fontsize=8, va="center")
    if cal.control is not None and len(names) >= 2:
        for s in cal.control.seeds:
            (x0, y0), (x1, y1) = where[(names[0], s)], where[(names[1], s)]
            seeds_ax.plot([x0, x1], [y0, y1], color="0.7", lw=0.6, zorder=1)
    seeds_ax.set_xticks(range(len(names)), [f"{n}\n({cal.spreads[n].n} runs)" for n in names])
    seeds_ax.set_xlim(-0.6, len(names) - 0.2)
    seeds_ax.set_ylabel(f"{label(cal.metric)} per run (axis zoomed to the runs)")
    seeds_ax.set_title("each run; lines join the same seed", fontsize=10)

    # A/A p-values: a calibrated test gives a flat histogram; the first bar is its FPR.
    bins = np.linspace(0, 1, 21)
    for t, color in (("student", "tab:blue"), ("paired", "tab:orange")):
        ps = [x for x in cal.aa_pvalues.get(t, []) if math.isfinite(x)]
        if ps:
            p_ax.hist(ps, bins=bins, density=True, histtype="step", lw=1.6, color=color,
                      label=f"{t} (a sample of {len(ps)} resampled splits)")
    p_ax.axhline(1.0, color="0.3", ls="--", lw=1, label="calibrated: uniform")
    p_ax.axvspan(0, alpha, color="tab:red", alpha=0.15, lw=0, label=f"p < {alpha}")
    p_ax.set_xlabel(f"A/A p-value ({names[0] if names else ''} vs itself, disjoint seeds)")
    p_ax.set_ylabel("density")
    p_ax.legend(fontsize=8)
    p_ax.set_title("A/A p-values", fontsize=10)

    # False-positive rates: resampled rate with its jackknife interval, disjoint exact interval.
    tests = list(cal.aa)
    top = min(1.0, max([0.25, *(1.2 * r.resampled_ci[1] for r in cal.aa.values()
                                 if math.isfinite(r.resampled_ci[1])),
                        *(1.2 * r.resampled for r in cal.aa.values())]))
    for i, t in enumerate(tests):
        r = cal.aa[t]
        if math.isfinite(r.ci[0]):
            hi = min(r.ci[1], top)
            fpr_ax.plot([i - 0.15, i - 0.15], [r.ci[0], hi], color="0.55", lw=3,
                        label="disjoint splits: exact 95% CI" if i == 0 else None)
            if r.ci[1] > top:
                fpr_ax.annotate(f"↑ {100 * r.ci[1]:.0f}%", (i - 0.22, top), fontsize=7,
                                ha="right", va="top")
        lo, hi = r.resampled_ci
        err = [[r.resampled - lo], [hi - r.resampled]] if math.isfinite(lo) else None
        fpr_ax.errorbar([i + 0.1], [r.resampled], yerr=err, fmt="o", color="tab:blue", capsize=4,
                        label="resampled: rate, jackknife 95%" if i == 0 else None)
    fpr_ax.axhline(alpha, color="tab:red", ls="--", lw=1, label=f"nominal {alpha}")
    short = {"student": "Student", "welch": "Welch", "paired": "paired",
             "family_any_star": "any * in\ntable", "family_holm": "any after\nHolm"}
    fpr_ax.set_xticks(range(len(tests)), [short.get(t, t) for t in tests], fontsize=8)
    fpr_ax.set_ylim(0, top)
    fpr_ax.set_ylabel("false-positive rate")
    fpr_ax.legend(fontsize=8)
    fpr_ax.set_title("false positives (A/A)", fontsize=10)

    # Power at g seeds against the true difference in the published direction (the chance of
    # finding it the right way round), at the measured stds.
    base = cal.spreads.get(names[0]) if names else None
    c = cal.control
    x_c = c.direction * c.diff if c is not None else 0.0
    hi_d = max(2.0, 1.3 * x_c, *(1.1 * d for d in cal.deltas))
    d = np.linspace(min(0.0, 1.3 * x_c), hi_d, 200)
    if base is not None and math.isfinite(base.sd) and base.sd > 0:
        pow_ax.plot(d, [t_power(x, base.sd, g, alpha, direction=1) for x in d], color="tab:blue",
                    label=f"Student, sigma = {names[0]} std {base.sd:.2f}")
    if c is not None and c.sd_diff > 0:
        pow_ax.plot(d, [t_power(x, c.sd_diff, g, alpha, "paired", direction=1) for x in d],
                    color="tab:orange", label=f"paired, sigma_d = {c.sd_diff:.2f} (control pairs)")
        for t, color in (("student", "tab:blue"), ("paired", "tab:orange")):
            pow_ax.scatter([x_c], [c.found[t].resampled], color=color, marker="s",
                           edgecolors="k", zorder=5,
                           label="positive control: found in (resampled)" if t == "student" else None)
    if cal.deltas:
        pow_ax.axvspan(min(cal.deltas), max(cal.deltas), color="0.5", alpha=0.15, lw=0,
                       label="published gaps")
    pow_ax.axhline(cal.power, color="0.3", ls=":", lw=1)
    pow_ax.set_ylim(0, 1.02)
    pow_ax.set_xlabel("true difference in the published direction (points)")
    pow_ax.set_ylabel(f"power with {g} seeds per cell")
    pow_ax.legend(fontsize=8, loc="lower right")
    pow_ax.set_title("power against the true difference", fontsize=10)
    for ax in (seeds_ax, fpr_ax, pow_ax):
        ax.grid(axis="y", alpha=0.3)
    return fig


def save_png(fig: Any, path: str | Path) -> Path:
    """Write a figure atomically (a reader never sees half a PNG), readable by all."""
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: directory {path.parent} does not exist; create it")
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a figure is meant to be shared
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path
