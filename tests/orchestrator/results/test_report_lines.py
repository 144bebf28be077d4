"""The report's plain-language lines: detectable differences, Holm's verdict, published direction."""

from __future__ import annotations

import csv
import io

import pytest

from orchestrator.analysis.stats import detectable_difference, pooled_sd
from orchestrator.analysis.tables import analyze, to_csv, to_markdown
from tests.orchestrator.results.report_store import ReportStore

SEEDS = (0, 1, 2, 3, 4)
# Avg and STS12 per seed; 'up' is clearly above 'base' on Avg, 'flat' is not.
AVG = {"base": [70.0, 71.0, 72.0, 73.0, 74.0], "up": [74.0, 75.5, 76.0, 77.0, 78.0],
       "flat": [70.5, 72.5, 71.0, 73.5, 73.0]}
STS12 = {"base": [60.0, 61.0, 62.0, 63.0, 64.0], "up": [61.0, 63.0, 62.0, 64.0, 63.5],
         "flat": [59.0, 60.5, 61.0, 62.0, 63.0]}
# The paper says 'up' beats the baseline and 'flat' loses to it, on both columns.
PUB = {"base": {"avg": 77.3, "STS12": 71.4}, "up": {"avg": 78.6, "STS12": 74.4},
       "flat": {"avg": 76.9, "STS12": 70.0}}


def _results(avg=AVG):
    return {c: {s: {"STS12": STS12[c][i], "avg": avg[c][i]} for i, s in enumerate(SEEDS)}
            for c in ("base", "up", "flat")}


def _section(md: str, heading: str) -> list[str]:
    lines = md.splitlines()
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return lines[start:end]


def _analysis(avg=AVG, **kw):
    return analyze(_results(avg), "base", SEEDS, columns=["STS12", "Avg"], published=PUB, **kw)


def test_one_detectable_line_per_cell_from_the_pooled_std():
    a = _analysis()
    md = to_markdown(a)
    assert "#### What these seeds can detect (Avg)" in md
    for cell in ("up", "flat"):
        c = a.entry(cell, "avg").comparison
        sp = pooled_sd(c.std_variant, c.std_baseline, 5, 5)
        assert c.detectable_student == pytest.approx(detectable_difference(sp, 5))
        line = next(x for x in md.splitlines() if x.startswith(f"- {cell}: "))
        assert f"{c.detectable_student:.2f} (Student, pooled seed std {sp:.2f} with base)" in line
        assert f"Observed Δ {c.diff:+.2f}" in line
    assert "80% power" in md and "n = 5 seeds" in md


def test_holm_sentence_lists_the_significant_differences():
    md = to_markdown(_analysis())
    line = next(x for x in md.splitlines() if x.startswith("Significant after Holm"))
    assert "family of 4 comparisons" in line
    assert "up on Avg (Δ +4.10" in line and "flat" not in line.split(":", 1)[1].split(".")[0]


def test_holm_sentence_says_none_when_nothing_survives():
    flat_all = {c: AVG["base"][::-1] if c != "base" else AVG["base"] for c in AVG}
    md = to_markdown(_analysis(avg=flat_all))
    line = next(x for x in md.splitlines() if x.startswith("Significant after Holm"))
    assert "alpha 0.05): none." in line
    assert "about 0.2 would by chance" in line


def test_demo_shows_the_published_direction_not_the_published_values():
    a = _analysis(directions_only=True)
    md = to_markdown(a)
    assert "Parity" not in md and "gap" not in md
    for v in ("77.3", "78.6", "76.9"):  # no BERT number anywhere
        assert v not in md
    assert "#### Published direction vs this run (Avg)" in md
    rows = _section(md, "#### Published direction vs this run (Avg)")
    up = next(x for x in rows if x.startswith("| up |"))
    assert up.startswith("| up | +1.30 | better | +4.10 | yes | yes (Holm p")
    flat = next(x for x in rows if x.startswith("| flat |"))
    # flat: paper -0.4 (worse), ours +0.10 on Avg: opposite sign, not significant; STS12 agrees.
    assert flat.startswith("| flat | -0.40 | worse | +0.10 | no | no (Holm p")
    assert flat.endswith("| 1 of 1 |")
    assert a.entry("up", "avg").gap is None
    assert a.entry("up", "avg").published_diff == pytest.approx(1.3)


def test_a_difference_that_rounds_to_zero_is_a_tie_not_a_direction():
    even = {**AVG, "up": [v + 0.001 for v in AVG["base"]]}
    rows = _section(to_markdown(_analysis(avg=even, directions_only=True)),
                    "#### Published direction vs this run (Avg)")
    assert next(x for x in rows if x.startswith("| up |")).startswith("| up | +1.30 | better | +0.00 | tie |")


def test_demo_csv_has_directions_but_no_published_values():
    rows = {(r["cell"], r["metric"]): r for r in csv.DictReader(io.StringIO(
        to_csv(_analysis(directions_only=True))))}
    assert rows[("up", "avg")]["published"] == "" and rows[("up", "avg")]["gap"] == ""
    assert float(rows[("up", "avg")]["published_diff"]) == pytest.approx(1.3)
    assert float(rows[("up", "avg")]["detectable_student"]) > 0
    paper = {(r["cell"], r["metric"]): r for r in csv.DictReader(io.StringIO(to_csv(_analysis())))}
    assert float(paper[("up", "avg")]["published"]) == 78.6
    assert float(paper[("up", "avg")]["gap"]) == pytest.approx(76.1 - 78.6)


def test_paper_profile_keeps_parity_and_no_direction_table():
    md = to_markdown(_analysis())
    assert "#### Parity with published numbers" in md and "Published direction" not in md


def test_on_matched_seeds_holm_uses_the_paired_test_with_the_unpaired_beside_it():
    """'steady' is 0.8 below the baseline on every seed, whose values spread by a point: the
    papers' unpaired test sees noise, the paired test over the matched seeds sees the effect."""
    base = [75.0, 76.2, 74.4, 75.8, 75.1]
    steady = [b - 0.8 + d for b, d in zip(base, [0.05, -0.04, 0.02, -0.06, 0.03], strict=True)]
    results = {"base": {s: {"avg": base[i]} for i, s in enumerate(SEEDS)},
               "steady": {s: {"avg": steady[i]} for i, s in enumerate(SEEDS)}}
    c = analyze(results, "base", SEEDS, columns=["Avg"]).entry("steady", "avg").comparison
    assert c.t_student_p > 0.05 and c.paired_p < 0.05
    md = to_markdown(analyze(results, "base", SEEDS, columns=["Avg"], holm_on="paired"))
    line = next(x for x in md.splitlines() if x.startswith("Significant after Holm"))
    assert line.startswith("Significant after Holm correction (paired p-values, family of 1 "
                           "comparisons, alpha 0.05): steady on Avg"), line
    assert line.endswith("With the papers' unpaired Student test instead: none."), line
    assert "the cells share their seeds, so the summary lines use the paired test" in md
    student = to_markdown(analyze(results, "base", SEEDS, columns=["Avg"]))
    assert "(student p-values, family of 1 comparisons, alpha 0.05): none." in student


def test_the_table_report_summarises_with_the_paired_test_unless_seeds_are_offset(tmp_path):
    from orchestrator.results.table_report import build_report

    base = [75.0, 76.2, 74.4, 75.8, 75.1]
    steady = [b - 0.8 + d for b, d in zip(base, [0.05, -0.04, 0.02, -0.06, 0.03], strict=True)]

    store = ReportStore({"base": {s: {"avg": base[i]} for i, s in enumerate(SEEDS)},
                         "steady": {s: {"avg": steady[i]} for i, s in enumerate(SEEDS)}})

    spec = {"cells": ["base", "steady"], "baseline": "base", "seeds": list(SEEDS),
            "columns": ["avg"], "title": "t", "plot": "bars"}
    analysis, md, err = build_report(store, "p", spec, tmp_path)
    assert err is None and analysis.holm_on == "paired" and "(paired p-values" in md
    analysis, md, _ = build_report(store, "p", {**spec, "seed_offsets": {"steady": 100}},
                                   tmp_path)
    assert analysis.holm_on == "student"
