"""The PNG of a paper table: bars with error bars per cell, or a line with a band for a sweep.

matplotlib's Agg canvas only (no pyplot state), so plots render in Ray workers and CI alike.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from orchestrator.tables import Entry, TableAnalysis, label, metric_key


def to_png(
    a: TableAnalysis,
    path: str | Path,
    kind: str = "bars",
    x: Mapping[str, float] | Sequence[float] | None = None,
    xlabel: str | None = None,
    metric: str = "avg",
) -> Path:
    """Plot one column (Avg by default) and write a PNG atomically.

    kind='bars': one bar per cell (mean, std error bar), the baseline mean as a dashed line,
    '*' over significant cells.
    kind='sweep': the non-baseline cells as a line over ``x`` (mapping cell -> x, or a sequence in
    non-baseline cell order; the baseline may have one too), a +-std band, the baseline as a
    horizontal mean +- std band. Published values are black diamonds in both kinds.
    Incomplete cells are drawn as labelled gaps, never as values.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    m = metric_key(metric)
    if m not in a.columns:
        raise ValueError(f"metric {metric!r} is not a table column {a.columns}")
    if kind not in ("bars", "sweep"):
        raise ValueError(f"kind must be 'bars' or 'sweep', got {kind!r}")
    fig = Figure(figsize=(max(6.0, 0.9 * len(a.cells) + 2), 4.2), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ent = {c: a.entries[(c, m)] for c in a.cells}
    ok = [c for c in a.cells if a.status[c].complete]
    base = ent[a.baseline]
    has_base = a.status[a.baseline].complete
    if kind == "bars":
        pos = {c: i for i, c in enumerate(a.cells)}
        colors = ["0.6" if c == a.baseline else "tab:blue" for c in ok]
        ax.bar([pos[c] for c in ok], [ent[c].mean for c in ok], yerr=[ent[c].std for c in ok],
               color=colors, capsize=4, label=f"mean ± std (n={len(a.seeds)})")
        if has_base:
            ax.axhline(base.mean, ls="--", color="0.3", lw=1, label=f"baseline ({a.baseline})")
        ax.set_xticks(range(len(a.cells)), a.cells, rotation=25, ha="right")
        xs = {c: float(pos[c]) for c in a.cells}
    else:
        cells = list(a.cells[1:])
        if x is None:
            raise ValueError("kind='sweep' needs x: a mapping cell -> x value, or one per cell")
        xmap = dict(x) if isinstance(x, Mapping) else dict(zip(cells, x, strict=True))
        if not set(cells) <= set(xmap) <= set(a.cells):
            raise ValueError(
                f"x must give a value for each non-baseline cell {cells} (the baseline's is "
                f"optional), got {sorted(xmap)}"
            )
        # A baseline with an x (e.g. the default margin) is also a point on the line.
        cells = [c for c in a.cells if c in xmap]
        xs = {c: float(xmap[c]) for c in cells}
        # Every x in order, nan for incomplete cells, so the line and band break there.
        line = sorted(cells, key=xs.get)
        px = [xs[c] for c in line]
        mu = [ent[c].mean if c in ok else math.nan for c in line]
        sd = [ent[c].std if c in ok else math.nan for c in line]
        ax.errorbar(px, mu, yerr=sd, fmt="o-", color="tab:blue", capsize=3,
                    label=f"mean ± std (n={len(a.seeds)})")
        ax.fill_between(px, [u - s for u, s in zip(mu, sd, strict=True)],
                        [u + s for u, s in zip(mu, sd, strict=True)], color="tab:blue", alpha=0.2)
        if has_base:
            ax.axhspan(base.mean - base.std, base.mean + base.std, color="0.5", alpha=0.2)
            ax.axhline(base.mean, ls="--", color="0.3", lw=1, label=f"baseline ({a.baseline}) ± std")
        ax.set_xlabel(xlabel or "")
    pubs = [c for c in xs if ent[c].published is not None]
    if pubs:
        ax.scatter([xs[c] for c in pubs], [ent[c].published for c in pubs], marker="D",
                   color="k", zorder=3, label="published")
    lo, hi = _ylim(ent, ok)
    for c in a.cells:
        if not a.status[c].complete and c in xs:
            ax.annotate("INCOMPLETE", (xs[c], lo), rotation=90, ha="center", va="bottom", color="tab:red")
        elif (cmp := ent[c].comparison) is not None and cmp.significant:
            ax.annotate("*", (xs[c], ent[c].mean + ent[c].std), ha="center", va="bottom", fontsize=14)
    ax.set_ylim(lo, hi)
    ax.set_ylabel(f"{label(m)} (mean ± std)")
    ax.set_title(f"{a.title} — {label(m)}" if a.title else label(m))
    ax.legend(fontsize=8, loc="best", title_fontsize=7,
              title=f"* Student t vs {a.baseline}, p < {a.alpha}")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
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


def _ylim(ent: Mapping[str, Entry], ok: Sequence[str]) -> tuple[float, float]:
    # Zoom on the data: the papers' gaps are ~1 point on a ~75 scale, invisible from zero.
    ys = [ent[c].mean + s * (ent[c].std if math.isfinite(ent[c].std) else 0) for c in ok for s in (-1, 1)]
    ys += [e.published for e in ent.values() if e.published is not None]
    if not ys:
        return 0.0, 1.0
    span = (max(ys) - min(ys)) or 1.0
    return min(ys) - 0.35 * span, max(ys) + 0.2 * span
