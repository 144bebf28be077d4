"""The table PNG shows the scale honestly (issue 13): a zero-based score axis, a difference panel
that includes 0, every seed as a point, and a title that is wrapped rather than clipped."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.collections import PathCollection

from orchestrator.analysis.plots import table_figure, to_png
from orchestrator.analysis.tables import analyze

SEEDS = (0, 1, 2, 3, 4)
LONG = ("KDMCSE Table 3: ablation (AdapACSE, threshold filter), BERT wiki+flickr, with a title "
        "long enough that a single line would run off both edges of the figure")


def _analysis(**kw):
    rng = np.random.default_rng(3)
    means = {"MCSE": 93.1, "KDMCSE": 93.4, "without AdapACSE": 93.25}
    res = {c: {s: {"avg": m + rng.normal(0, 0.15)} for s in SEEDS} for c, m in means.items()}
    pub = {"MCSE": {"avg": 77.3}, "KDMCSE": {"avg": 78.6}, "without AdapACSE": {"avg": 78.2}}
    return analyze(res, "MCSE", SEEDS, columns=["avg"], published=pub, title=LONG, **kw)


def _points(ax) -> list[tuple[float, float]]:
    return [tuple(p) for c in ax.collections if isinstance(c, PathCollection)
            for p in c.get_offsets()]


def test_score_axis_starts_at_zero_and_shows_every_seed():
    a = _analysis()
    fig = table_figure(a)
    scores, diffs = fig.axes[:2]
    assert scores.get_ylim()[0] <= 0 < 93 < scores.get_ylim()[1]
    ys = {round(y, 9) for _, y in _points(scores)}
    for cell in a.cells:
        assert {round(v, 9) for v in a.entry(cell, "avg").values.values()} <= ys
    # Differences: 0 is on the axis; each seed's difference to the baseline's same seed is drawn.
    lo, hi = diffs.get_ylim()
    assert lo < 0 < hi
    base = a.entry("MCSE", "avg").values
    dys = {round(y, 9) for _, y in _points(diffs)}
    for cell in ("KDMCSE", "without AdapACSE"):
        per_seed = {round(v - base[s], 9) for s, v in a.entry(cell, "avg").values.items()}
        assert per_seed <= dys


def test_title_is_wrapped_inside_the_figure():
    fig = table_figure(_analysis())
    title = fig._suptitle
    assert "\n" in title.get_text() and title.get_text().replace("\n", " ").startswith(LONG)
    fig.canvas.draw()
    box = title.get_window_extent(fig.canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width


def test_published_values_only_outside_the_demo():
    def diamonds(fig):
        return [y for ax in fig.axes[:1] for c in ax.collections
                if isinstance(c, PathCollection) and c.get_label() == "published value"
                for _, y in c.get_offsets()]

    assert sorted(diamonds(table_figure(_analysis()))) == pytest.approx([77.3, 78.2, 78.6])
    assert diamonds(table_figure(_analysis(directions_only=True))) == []


def test_png_written(tmp_path):
    from PIL import Image

    path = to_png(_analysis(directions_only=True), tmp_path / "t.png")
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size[0] >= 1200


def test_panel_titles_fit_even_for_a_one_cell_table():
    rng = np.random.default_rng(0)
    res = {c: {s: {"avg": 39.6 + rng.normal(0, 0.05)} for s in SEEDS} for c in ("MCSE", "SimCSE")}
    fig = table_figure(analyze(res, "MCSE", SEEDS, columns=["avg"], title=LONG))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:2]:
        box = ax.title.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width, ax.title.get_text()
