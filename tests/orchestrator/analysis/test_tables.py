"""orchestrator.analysis.tables on small hand-made tables: statistics, INCOMPLETE cells, Markdown/CSV/PNG."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
from scipy import stats as sps

from orchestrator.analysis.plots import to_png
from orchestrator.analysis.stats import compare, holm
from orchestrator.analysis.tables import STS_TASKS, analyze, to_csv, to_markdown

SEEDS = (0, 1, 2, 3, 4)
# Avg per seed. base: mean 72.0, std sqrt(2.5) = 1.58. better: +4 with the same spread, so
# t = 4 / (1.581 * sqrt(2/5)) = 4.0 on 8 df (p ~ 0.004). same: mean 72.1, clearly not significant.
AVG = {
    "base": [70.0, 71.0, 72.0, 73.0, 74.0],
    "better": [74.0, 75.0, 76.0, 77.0, 78.0],
    "same": [70.5, 72.5, 71.0, 73.5, 73.0],
}
# STS12 column: better is not significant there, same is (so '*' must follow the column).
STS12 = {
    "base": [60.0, 61.0, 62.0, 63.0, 64.0],
    "better": [59.0, 63.0, 61.0, 64.0, 62.5],
    "same": [66.0, 67.0, 66.5, 68.0, 67.5],
}


def _results() -> dict:
    return {
        cell: {s: {"STS12": STS12[cell][i], "avg": AVG[cell][i]} for i, s in enumerate(SEEDS)}
        for cell in ("base", "better", "same")
    }


def _same(x: float, y: float) -> bool:
    return (math.isnan(x) and math.isnan(y)) or x == y


def _analysis(results=None, **kw):
    return analyze(results or _results(), "base", SEEDS, columns=["STS12", "Avg"], **kw)


def test_scipy_agrees_with_the_hand_made_cases():
    # Check the premises of the '*' tests with scipy directly.
    assert sps.ttest_ind(AVG["better"], AVG["base"]).pvalue < 0.05
    assert sps.ttest_ind(AVG["same"], AVG["base"]).pvalue > 0.05
    assert sps.ttest_ind(STS12["better"], STS12["base"]).pvalue > 0.05
    assert sps.ttest_ind(STS12["same"], STS12["base"]).pvalue < 0.05
    assert sps.ttest_ind(AVG["better"], AVG["base"]).statistic == pytest.approx(4.0)


def test_markdown_main_table_and_star_placement():
    md = to_markdown(_analysis(title="Toy table"))
    lines = md.splitlines()
    assert lines[0] == "### Toy table"
    assert "| cell | STS12 | Avg |" in lines
    # mean ± std with one decimal; '*' exactly where Student p < 0.05.
    assert "| base (baseline) | 62.0±1.6 | 72.0±1.6 |" in lines
    assert "| better | 61.9±1.9 | 76.0±1.6* |" in lines
    assert "| same | 67.0±0.8* | 72.1±1.3 |" in lines
    # Baseline row comes first.
    assert md.index("base (baseline)") < md.index("| better |") < md.index("| same |")


def test_footnote_states_n_test_correction_alpha():
    md = to_markdown(_analysis())
    assert "n = 5 seeds per cell (seeds 0, 1, 2, 3, 4)" in md
    assert "Student t-test (equal variances) vs base, p < 0.05" in md
    assert "Holm step-down adjustment of the student p-values over the family of 4 comparisons" in md
    assert "Welch-Satterthwaite" in md and "Hedges' g" in md and "ddof=1" in md


def test_statistics_match_stats_module_and_holm_family():
    a = _analysis()
    ps = []
    for cell in ("better", "same"):
        for col, data in (("STS12", STS12), ("avg", AVG)):
            c = a.entry(cell, col).comparison
            ref = compare(dict(zip(SEEDS, data[cell], strict=True)), dict(zip(SEEDS, data["base"], strict=True)))
            for f in ("diff", "t_student_p", "welch_p", "paired_p", "hedges_g", "ci_low", "ci_high"):
                assert _same(getattr(c, f), getattr(ref, f)), (cell, col, f)
            assert c.t_student_p == pytest.approx(sps.ttest_ind(data[cell], data["base"]).pvalue)
            ps.append(c.t_student_p)
    # Family = 2 non-baseline cells x 2 columns, adjusted together.
    expected = holm(ps)
    got = [a.entry(c, m).holm_p for c in ("better", "same") for m in ("STS12", "avg")]
    np.testing.assert_allclose(got, expected)
    assert a.family_size == 4
    assert a.entry("base", "avg").comparison is None and math.isnan(a.entry("base", "avg").holm_p)
    md = to_markdown(a)
    c = a.entry("better", "Avg").comparison
    assert f"| better | Avg | +4.00 | {c.t_student_p:.3f}* |" in md


def test_avg_is_filled_from_the_seven_tasks_when_absent():
    rng = np.random.default_rng(0)
    res = {
        cell: {s: {t: 70 + off + rng.normal() for t in STS_TASKS} for s in SEEDS}
        for cell, off in (("b", 0.0), ("v", 1.0))
    }
    a = analyze(res, "b", SEEDS)
    expected = np.mean([[res["v"][s][t] for t in STS_TASKS] for s in SEEDS], axis=1)
    assert a.entry("v", "Avg").values == pytest.approx(dict(zip(SEEDS, expected, strict=True)))
    assert a.columns[-1] == "avg" and "| cell | STS12 | STS13 | STS14 | STS15 | STS16 | STS-B | SICK-R | Avg |" in to_markdown(a)


def test_incomplete_cell_gets_no_statistics_and_is_shown():
    res = _results()
    del res["better"][3]  # failed trial
    res["same"][1]["avg"] = float("nan")  # diverged seed
    a = _analysis(res)
    assert not a.status["better"].complete and a.status["better"].missing_seeds == (3,)
    assert a.status["same"].problems == ("seed 1: avg = nan",)
    for cell in ("better", "same"):
        for m in ("STS12", "avg"):
            e = a.entry(cell, m)
            assert e.comparison is None and math.isnan(e.mean) and math.isnan(e.holm_p)
    assert a.family_size == 0
    md = to_markdown(a)
    assert "| better INCOMPLETE (missing seeds 3) | — | — |" in md
    assert "| same INCOMPLETE (missing seeds 1) | — | — |" in md
    assert "- better: seed 3: no result" in md
    assert "61.9" not in md  # the 4 remaining seeds are never summarised
    rows = list(csv.DictReader(io.StringIO(to_csv(a))))
    better = [r for r in rows if r["cell"] == "better"]
    assert {r["status"] for r in better} == {"incomplete"}
    assert {r["missing_seeds"] for r in better} == {"3"}
    assert all(r["student_p"] == "" and r["mean"] == "nan" for r in better)


def test_missing_metric_and_extra_seed():
    res = _results()
    del res["same"][2]["STS12"]
    res["better"][7] = {"STS12": 99.0, "avg": 99.0}
    a = _analysis(res)
    assert a.status["same"].problems == ("seed 2: no STS12",)
    assert a.status["better"].complete and a.status["better"].extra_seeds == (7,)
    assert 7 not in a.entry("better", "avg").values  # the extra seed is not used
    assert "- better: extra seeds [7] ignored" in to_markdown(a)


def test_incomplete_baseline_means_no_tests_anywhere():
    res = _results()
    del res["base"][0]
    a = _analysis(res)
    assert all(e.comparison is None for e in a.entries.values())
    md = to_markdown(a)
    assert "Baseline base is INCOMPLETE: no tests were computed." in md
    assert "| better | 61.9±1.9 | 76.0±1.6 |" in md  # still summarised, never starred


def test_parity_with_published_numbers():
    pub = {"base": {"Avg": 71.5}, "better": {"avg": 76.3, "STS12": 61.0}}
    a = _analysis(published=pub)
    assert a.entry("base", "avg").gap == pytest.approx(72.0 - 71.5)
    assert a.entry("better", "avg").gap == pytest.approx(76.0 - 76.3)
    assert a.entry("same", "avg").published is None and a.entry("same", "avg").gap is None
    md = to_markdown(a)
    assert "#### Parity with published numbers" in md
    assert "| base | Avg | 71.50 | 72.0 | +0.50 |" in md
    assert "| better | Avg | 76.30 | 76.0 | -0.30 |" in md
    assert "| better | STS12 | 61.00 | 61.9 | +0.90 |" in md
    assert "Parity" not in to_markdown(_analysis())


def test_csv_parses_back_to_the_stats_values():
    a = _analysis(published={"better": {"avg": 76.3}})
    rows = list(csv.DictReader(io.StringIO(to_csv(a))))
    assert len(rows) == 3 * 2
    by = {(r["cell"], r["metric"]): r for r in rows}
    for cell in ("better", "same"):
        for m, data in (("STS12", STS12), ("avg", AVG)):
            r = by[(cell, m)]
            c = compare(dict(zip(SEEDS, data[cell], strict=True)), dict(zip(SEEDS, data["base"], strict=True)))
            for field, value in (("diff", c.diff), ("student_p", c.t_student_p), ("welch_p", c.welch_p),
                                 ("paired_p", c.paired_p), ("hedges_g", c.hedges_g),
                                 ("ci_low", c.ci_low), ("ci_high", c.ci_high),
                                 ("mean", c.mean_variant), ("std", c.std_variant)):
                assert _same(float(r[field]), value), (cell, m, field)
            assert r["significant"] == str(c.significant) and int(r["n_paired"]) == 5
            assert float(r["holm_p"]) == a.entry(cell, m).holm_p
            assert [float(r[f"seed_{s}"]) for s in SEEDS] == data[cell]
    # better = base + 4 on every seed: constant paired differences -> paired p is nan, said so.
    assert by[("better", "avg")]["paired_p"] == "nan"
    assert float(by[("better", "avg")]["gap"]) == pytest.approx(76.0 - 76.3)
    assert by[("base", "avg")]["role"] == "baseline" and by[("base", "avg")]["student_p"] == ""
    ref = compare(dict(zip(SEEDS, AVG["same"], strict=True)), dict(zip(SEEDS, AVG["base"], strict=True)))
    assert float(by[("base", "avg")]["mean"]) == ref.mean_baseline == 72.0
    assert float(by[("base", "avg")]["std"]) == ref.std_baseline


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="baseline 'nope' is not among the cells"):
        analyze(_results(), "nope", SEEDS)
    with pytest.raises(ValueError, match="distinct"):
        analyze(_results(), "base", [0, 0, 1])
    with pytest.raises(ValueError, match="unknown cell 'ghost'"):
        _analysis(published={"ghost": {"avg": 1.0}})
    with pytest.raises(ValueError, match="not a table column"):
        _analysis(published={"base": {"STS16": 1.0}})
    res = _results()
    res["same"][4]["avg"] = "n/a"
    with pytest.raises(ValueError, match="cell 'same' seed 4 metric avg: non-numeric value 'n/a'"):
        _analysis(res)


def test_png_bars_and_sweep(tmp_path):
    from PIL import Image

    res = _results()
    del res["same"][0]
    a = _analysis(res, published={"better": {"avg": 76.3}}, title="Toy")
    bars = to_png(a, tmp_path / "bars.png")
    sweep = to_png(_analysis(), tmp_path / "sweep.png", kind="sweep", x=[0.1, 0.2], xlabel="margin")
    for path in (bars, sweep):
        assert path.stat().st_size > 10_000
        with Image.open(path) as im:
            assert im.format == "PNG" and im.size[0] >= 600 and im.size[1] >= 400
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bars.png", "sweep.png"]  # no temp left
    with pytest.raises(ValueError, match="needs x"):
        to_png(a, tmp_path / "s.png", kind="sweep")
    with pytest.raises(ValueError, match="each non-baseline cell"):
        to_png(a, tmp_path / "s.png", kind="sweep", x={"better": 1.0})
    with pytest.raises(ValueError, match="each non-baseline cell"):
        to_png(a, tmp_path / "s.png", kind="sweep", x={"better": 1.0, "same": 2.0, "ghost": 3.0})
    # The baseline may sit on the sweep too (e.g. the default margin); an incomplete cell is a gap.
    with_base = to_png(a, tmp_path / "b.png", kind="sweep", x={"base": 0.0, "better": 1.0, "same": 2.0})
    assert with_base.stat().st_size > 10_000
    with pytest.raises(ValueError, match="kind must be"):
        to_png(a, tmp_path / "s.png", kind="pie")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        to_png(a, tmp_path / "no" / "s.png")


def test_identical_cells_are_named():
    res = _results()
    res["copy"] = {s: dict(v) for s, v in res["better"].items()}
    md = to_markdown(_analysis(res))
    assert "Identical results (every seed, every column): better = copy." in md
    res["copy"][4]["STS12"] += 1e-9  # any difference at all: no warning
    assert "Identical results" not in to_markdown(_analysis(res))
    assert "Identical results" not in to_markdown(_analysis())
