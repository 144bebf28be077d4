"""The PNG of a paper table: the full scale beside the differences to the baseline.

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

from orchestrator.tables import TableAnalysis, label, metric_key

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
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": (len(xs), max(1, len(xd)))}
                               if kind == "bars" else None)
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
    ax.set_title("scores: mean ± std and each seed", fontsize=10)


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
    ax.set_title(f"difference to {a.baseline}; * Student t p < {a.alpha} (unadjusted)", fontsize=10)


def _step(xs: Mapping[str, float]) -> float:
    v = sorted(set(xs.values()))
    return min((b - a for a, b in zip(v, v[1:], strict=False)), default=1.0) or 1.0


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


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
