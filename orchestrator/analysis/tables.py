"""A paper table from per-seed results: statistics vs the baseline, parity, Markdown and CSV.

The papers' tables (MCSE Table 1, KDMCSE Tables 1-3, DALR Tables 1-3) are rows of cells (methods or
ablations) by columns STS12-16, STS-B, SICK-R, Avg, each entry the mean +- std over five seeds with
``*`` for a significant independent t-test against the baseline (docs/official-code.md §7.4).
:func:`analyze` turns ``cell -> seed -> metric -> value`` into a :class:`TableAnalysis` holding that
and more for every (cell, column): Welch and paired tests, a Holm adjustment over the whole table,
Hedges' g, a 95% CI of the difference, the smallest difference the seeds could detect at 80%
power, and the gap to the published number (ours - published). When the published numbers come
from another setting (``directions_only``: the demo profile), only their direction is compared.

A cell missing any expected seed (a failed trial, or a nan / absent metric in one) is INCOMPLETE:
it gets no statistics at all rather than a test silently run on fewer seeds, and every renderer
says which seeds are missing. Values are in the papers' units (Spearman x 100 for STS columns).
numpy and scipy only, so a table can be regenerated from exported results without Ray, MLflow or
torch; its PNG is drawn by ``orchestrator.analysis.plots``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.analysis.stats import Comparison, compare, holm, sd_interval

STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
DEFAULT_COLUMNS = (*STS_TASKS, "avg")
TRANSFER_PREFIX = "transfer/"
"""SentEval's transfer tasks (TR): accuracy x 100, 'transfer/<task>' and 'transfer/avg'"""
LABELS = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R", "avg": "Avg",
          "transfer/avg": "TR Avg", "transfer/SST2": "SST-2"}
_ALIASES = {k.lower(): k for k in (*DEFAULT_COLUMNS, "alignment", "uniformity")} | {
    v.lower(): k for k, v in LABELS.items()
}
HOLM_ON = {"student": "t_student_p", "welch": "welch_p", "paired": "paired_p"}


def metric_key(name: str) -> str:
    """Canonical metric key for a column or published-number name ('STS-B' -> 'STSBenchmark')."""
    return _ALIASES.get(name.lower(), name)


def label(metric: str) -> str:
    return LABELS.get(metric, metric.removeprefix(TRANSFER_PREFIX))


def _decimals(metric: str) -> int:
    # Papers print Spearman x 100 with one decimal, alignment/uniformity with three and DALR its
    # transfer accuracies with two.
    if metric.startswith(TRANSFER_PREFIX):
        return 2
    return 3 if metric in ("alignment", "uniformity") else 1


@dataclass(frozen=True)
class CellStatus:
    cell: str
    missing_seeds: tuple[int, ...]
    """expected seeds with no result or a missing / non-finite metric"""
    problems: tuple[str, ...]
    """one line per problem, e.g. 'seed 3: no result', 'seed 4: STS12 = nan'"""
    extra_seeds: tuple[int, ...]
    """seeds present in the results but not expected: ignored, reported"""

    @property
    def complete(self) -> bool:
        return not self.missing_seeds


@dataclass(frozen=True)
class Entry:
    """One (cell, metric) of the table. Statistics are nan / None unless the cell is complete."""

    cell: str
    metric: str
    values: Mapping[int, float]
    """seed -> value, the finite values found (all expected seeds when complete)"""
    mean: float
    std: float
    comparison: Comparison | None
    """vs the baseline; None for the baseline itself, an incomplete cell or baseline"""
    holm_p: float
    published: float | None
    gap: float | None
    """mean - published; None when the table compares directions only"""
    published_diff: float | None = None
    """published(cell) - published(baseline): the effect the paper reports"""


@dataclass(frozen=True)
class TableAnalysis:
    title: str
    baseline: str
    cells: tuple[str, ...]
    """baseline first"""
    columns: tuple[str, ...]
    seeds: tuple[int, ...]
    alpha: float
    holm_on: str
    status: Mapping[str, CellStatus]
    entries: Mapping[tuple[str, str], Entry]
    power: float = 0.8
    """the power of the detectable differences"""
    directions_only: bool = False
    """the published numbers come from another setting: compare their sign, never their value"""

    def entry(self, cell: str, metric: str) -> Entry:
        return self.entries[(cell, metric_key(metric))]

    @property
    def family_size(self) -> int:
        """Number of comparisons in the Holm family (those with a finite p-value)."""
        attr = HOLM_ON[self.holm_on]
        return sum(
            1 for e in self.entries.values()
            if e.comparison is not None and not math.isnan(getattr(e.comparison, attr))
        )


def _seed_values(cell, per_seed, seeds, columns):
    """Collect values per column; report every missing / non-finite one instead of dropping it."""
    values: dict[str, dict[int, float]] = {m: {} for m in columns}
    problems, missing = [], set()
    for seed in seeds:
        if seed not in per_seed:
            problems.append(f"seed {seed}: no result")
            missing.add(seed)
            continue
        row = {metric_key(k): v for k, v in per_seed[seed].items()}
        if "avg" in columns and "avg" not in row and all(t in row for t in STS_TASKS):
            row["avg"] = sum(float(row[t]) for t in STS_TASKS) / len(STS_TASKS)  # papers' Avg
        for m in columns:
            if m not in row:
                problems.append(f"seed {seed}: no {m}")
                missing.add(seed)
                continue
            try:
                v = float(row[m])
            except (TypeError, ValueError):
                raise ValueError(
                    f"cell {cell!r} seed {seed} metric {m}: non-numeric value {row[m]!r}"
                ) from None
            if math.isfinite(v):
                values[m][seed] = v
            else:
                problems.append(f"seed {seed}: {m} = {v}")
                missing.add(seed)
    extra = tuple(sorted(set(per_seed) - set(seeds)))
    return values, CellStatus(cell, tuple(sorted(missing)), tuple(problems), extra)


def analyze(
    results: Mapping[str, Mapping[int, Mapping[str, float]]],
    baseline: str,
    seeds: Sequence[int],
    columns: Sequence[str] = DEFAULT_COLUMNS,
    published: Mapping[str, Mapping[str, float]] | None = None,
    alpha: float = 0.05,
    title: str = "",
    holm_on: str = "student",
    power: float = 0.8,
    directions_only: bool = False,
) -> TableAnalysis:
    """Analyse one table: every cell vs ``baseline`` on every column, over the expected ``seeds``.

    Args:
        results: cell -> seed -> metric -> value (Spearman x 100; 'avg' is filled with the mean of
            the seven STS tasks when absent). Row order is the mapping's, baseline moved first.
        baseline: the cell every other cell is tested against (same seeds: paired design).
        seeds: the expected seed list; a cell lacking any of them is INCOMPLETE.
        columns: metric keys or labels ('STS-B', 'Avg' are accepted).
        published: optional cell -> metric -> published value (e.g. only {'avg': 77.3}).
        alpha: level of the Student test behind '*' (papers: 0.05).
        holm_on: which p-value Holm adjusts over the family (non-baseline cells x columns):
            'student' (default, the papers' test), 'welch' or 'paired'.
        power: the power at which each comparison's detectable difference is computed.
        directions_only: the published numbers are from another setting (the demo profile):
            no gap is computed and the report compares only the published direction.
    """
    if baseline not in results:
        raise ValueError(f"baseline {baseline!r} is not among the cells {sorted(results)}")
    seeds = tuple(int(s) for s in seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct ids, got {seeds}")
    cols = tuple(metric_key(c) for c in columns)
    if not cols or len(set(cols)) != len(cols):
        raise ValueError(f"columns must be non-empty and distinct, got {tuple(columns)}")
    if holm_on not in HOLM_ON:
        raise ValueError(f"holm_on must be one of {tuple(HOLM_ON)}, got {holm_on!r}")
    pub = {}
    for cell, row in (published or {}).items():
        if cell not in results:
            raise ValueError(f"published numbers given for unknown cell {cell!r}; cells: {sorted(results)}")
        for m, v in row.items():
            if metric_key(m) not in cols:
                raise ValueError(f"published {cell!r} metric {m!r} is not a table column {cols}")
            pub[(cell, metric_key(m))] = float(v)

    cells = (baseline, *(c for c in results if c != baseline))
    values, status = {}, {}
    for cell in cells:
        values[cell], status[cell] = _seed_values(cell, results[cell], seeds, cols)
    comps: dict[tuple[str, str], Comparison] = {}
    if status[baseline].complete:
        for cell in cells[1:]:
            if status[cell].complete:
                for m in cols:
                    comps[(cell, m)] = compare(values[cell][m], values[baseline][m], alpha=alpha,
                                               power=power)
    keys = list(comps)
    adjusted = dict(zip(keys, holm([getattr(comps[k], HOLM_ON[holm_on]) for k in keys]), strict=True))

    entries = {}
    for cell in cells:
        done = status[cell].complete
        for m in cols:
            vals = values[cell][m]
            c = comps.get((cell, m))
            x = np.array(list(vals.values()))
            # Same numpy reductions as stats.compare, so baseline rows match it bit for bit.
            ours = c.mean_variant if c else (float(x.mean()) if done else math.nan)
            std = c.std_variant if c else (float(np.std(x, ddof=1)) if done and x.size > 1 else math.nan)
            p, pb = pub.get((cell, m)), pub.get((baseline, m))
            entries[(cell, m)] = Entry(
                cell, m, dict(vals), ours, std, c, float(adjusted.get((cell, m), math.nan)), p,
                ours - p if p is not None and done and not directions_only else None,
                p - pb if p is not None and pb is not None and cell != baseline else None,
            )
    return TableAnalysis(title, baseline, cells, cols, seeds, alpha, holm_on, status, entries,
                         power, directions_only)


# ---------------------------------------------------------------------------------------- render


def p_text(p: float) -> str:
    """A p-value as the reports print it: three decimals, or two digits below 0.001."""
    if math.isnan(p):
        return "n/a"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


_p = p_text


def _num(x: float | None, d: int, sign: bool = False) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    return f"{x:+.{d}f}" if sign else f"{x:.{d}f}"


def _row_label(a: TableAnalysis, cell: str) -> str:
    st = a.status[cell]
    tag = " (baseline)" if cell == a.baseline else ""
    if not st.complete:
        tag += f" INCOMPLETE (missing seeds {', '.join(map(str, st.missing_seeds))})"
    return cell + tag


def _footnote(a: TableAnalysis) -> str:
    n = len(a.seeds)
    text = (
        f"n = {n} seeds per cell (seeds {', '.join(map(str, a.seeds))}), the same seeds in every "
        f"cell; entries are mean ± sample std (ddof=1). * = two-sided independent two-sample "
        f"Student t-test (equal variances) vs {a.baseline}, p < {a.alpha}, unadjusted, as in the "
        f"papers. Holm = Holm step-down adjustment of the {a.holm_on} p-values over the family of "
        f"{a.family_size} comparisons (non-baseline complete cells × {len(a.columns)} columns)"
        f"{' (the cells share their seeds, so the summary lines use the paired test)' if a.holm_on == 'paired' else ''}. "
        f"Paired = paired t-test over matched seeds; g = Hedges' g (exact small-sample correction "
        f"J); 95% CI = Welch-Satterthwaite interval of ours − baseline."
    )
    if not a.status[a.baseline].complete:
        text += f" Baseline {a.baseline} is INCOMPLETE: no tests were computed."
    return text


def identical_cells(a: TableAnalysis) -> list[tuple[str, ...]]:
    """Groups of complete cells whose every (seed, column) value is equal: worth a warning, since
    it usually means a short run, and otherwise a setting that never reached the model."""
    groups: dict[tuple, list[str]] = {}
    for cell in a.cells:
        if a.status[cell].complete:
            key = tuple(tuple(sorted(a.entries[(cell, m)].values.items())) for m in a.columns)
            groups.setdefault(key, []).append(cell)
    return [tuple(g) for g in groups.values() if len(g) > 1]


def to_markdown(a: TableAnalysis) -> str:
    """The paper-shaped table, then per-cell statistics, parity, and the footnote."""
    heads = [label(m) for m in a.columns]
    out = [f"### {a.title}", ""] if a.title else []
    out += ["| cell | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    for cell in a.cells:
        row = []
        for m in a.columns:
            e, d = a.entries[(cell, m)], _decimals(m)
            if not a.status[cell].complete:
                row.append("—")
                continue
            star = "*" if e.comparison is not None and e.comparison.significant else ""
            row.append(f"{e.mean:.{d}f}±{_num(e.std, d)}{star}")
        out.append(f"| {_row_label(a, cell)} | " + " | ".join(row) + " |")
    out += ["", _footnote(a), ""]
    problems = [f"- {c}: {'; '.join(s.problems)}" for c, s in a.status.items() if s.problems]
    problems += [f"- {c}: extra seeds {list(s.extra_seeds)} ignored" for c, s in a.status.items() if s.extra_seeds]
    if problems:
        out += ["Incomplete or extra results:", *problems, ""]
    same = identical_cells(a)
    if same:
        out += ["Identical results (every seed, every column): "
                + "; ".join(" = ".join(group) for group in same)
                + ". The settings that differ changed no score at this run length (a ranking "
                "statistic ignores tiny weight changes); a longer run may separate them.", ""]

    out += [f"#### Statistics vs {a.baseline}", ""]
    out += ["| cell | metric | Δ | Student p | Welch p | paired p | Holm p | g | 95% CI |",
            "|---" * 9 + "|"]
    head = _headline(a)
    order = [head] + [m for m in a.columns if m != head]
    for cell in a.cells[1:]:
        if not a.status[cell].complete or not a.status[a.baseline].complete:
            out.append(f"| {_row_label(a, cell)} | all | no statistics" + " | —" * 6 + " |")
            continue
        for m in order:
            e = a.entries[(cell, m)]
            c, d = e.comparison, _decimals(m) + 1
            star = "*" if c.significant else ""
            out.append(
                f"| {cell} | {label(m)} | {_num(c.diff, d, True)} | {_p(c.t_student_p)}{star} | "
                f"{_p(c.welch_p)} | {_p(c.paired_p)} | {_p(e.holm_p)} | {_num(c.hedges_g, 2, True)} "
                f"| [{_num(c.ci_low, d, True)}, {_num(c.ci_high, d, True)}] |"
            )
    out += ["", _holm_sentence(a), "", *_detectable_lines(a)]
    if a.directions_only:
        out += _direction_lines(a)
        return "\n".join(out) + "\n"
    pubs = [e for c in a.cells for m in a.columns if (e := a.entries[(c, m)]).published is not None]
    if pubs:
        out += ["", "#### Parity with published numbers", "",
                "| cell | metric | published | ours | gap (ours − published) |", "|---" * 5 + "|"]
        for e in pubs:
            d = _decimals(e.metric)
            ours = _num(e.mean, d) if a.status[e.cell].complete else "INCOMPLETE"
            out.append(f"| {e.cell} | {label(e.metric)} | {e.published:.{d + 1}f} | {ours} | "
                       f"{_num(e.gap, d + 1, True)} |")
    return "\n".join(out) + "\n"


def _tested(a: TableAnalysis) -> list[Entry]:
    return [e for c in a.cells[1:] for m in a.columns
            if (e := a.entries[(c, m)]).comparison is not None]


def _headline(a: TableAnalysis) -> str:
    """The column a one-line summary speaks of: Avg (or TR Avg) when the table has it."""
    return next((m for m in ("avg", "transfer/avg") if m in a.columns), a.columns[0])


def _holm_sentence(a: TableAnalysis) -> str:
    """Which differences survive Holm's correction, said in words (or 'none')."""
    attr = HOLM_ON[a.holm_on]
    tested = [e for e in _tested(a) if not math.isnan(getattr(e.comparison, attr))]
    if not tested:
        return "Significant after Holm correction: no test was computed."
    sig = [e for e in tested if e.holm_p < a.alpha]
    head = (f"Significant after Holm correction ({a.holm_on} p-values, family of {len(tested)} "
            f"comparisons, alpha {a.alpha}): ")
    if sig:
        head += "; ".join(f"{e.cell} on {label(e.metric)} (Δ {_num(e.comparison.diff, _decimals(e.metric) + 1, True)}, "
                          f"Holm p {_p(e.holm_p)})" for e in sig) + "."
    else:
        head += "none."
    raw = sum(1 for e in tested if getattr(e.comparison, attr) < a.alpha)
    out = (head + f" Unadjusted, {raw} of {len(tested)} have p < {a.alpha}; were no effect real, "
           f"about {a.alpha * len(tested):.1f} would by chance.")
    if a.holm_on != "student":  # the papers' unpaired test beside the one the summary uses
        unpaired = [e for e in _tested(a) if not math.isnan(e.comparison.t_student_p)]
        adj = holm([e.comparison.t_student_p for e in unpaired])
        kept = [f"{e.cell} on {label(e.metric)} (Holm p {_p(q)})"
                for e, q in zip(unpaired, adj, strict=True) if q < a.alpha]
        out += (f" With the papers' unpaired Student test instead: "
                f"{'; '.join(kept) if kept else 'none'}.")
    return out


def _detectable_lines(a: TableAnalysis) -> list[str]:
    """One line per cell: the smallest true difference its seeds could detect, and the observed."""
    m = _headline(a)
    d = _decimals(m) + 1
    rows = []
    for cell in a.cells[1:]:
        c = a.entries[(cell, m)].comparison
        if c is None:
            rows.append(f"- {cell}: no statistics (incomplete).")
            continue
        paired = ("" if math.isnan(c.detectable_paired) else
                  f"; paired test {_num(c.detectable_paired, d)} (std of per-seed differences "
                  f"{_num(c.sd_diff, d)})")
        rows.append(f"- {cell}: {_num(c.detectable_student, d)} (Student, pooled seed std "
                    f"{_num(c.sd_pooled, d)} with {a.baseline}){paired}. Observed Δ "
                    f"{_num(c.diff, d, True)}.")
    if not rows:
        return []
    n = len(a.seeds)
    lo, hi = sd_interval(1.0, n)
    return [f"#### What these seeds can detect ({label(m)})", "",
            f"The smallest true difference these n = {n} seeds could detect with "
            f"{a.power:.0%} power (two-sided, alpha {a.alpha}), given the measured seed std. A true "
            "effect below it is more likely missed than found, so 'not significant' does not mean "
            f"'no effect'. The std of {n} seeds is itself uncertain (95% interval {lo:.1f}x to "
            f"{hi:.1f}x the measured one), and so is this figure.", "", *rows]


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _direction_lines(a: TableAnalysis) -> list[str]:
    """Demo profile: the published effect's direction against ours, never the published values."""
    rows = []
    m = _headline(a)
    tasks = [t for t in a.columns if t != m]
    for cell in a.cells[1:]:
        e = a.entries[(cell, m)]
        if e.published_diff is None:
            continue
        pd = e.published_diff
        says = "better" if pd > 0 else "worse" if pd < 0 else "equal"
        c, d = e.comparison, _decimals(m) + 1
        if c is None:
            rows.append(f"| {cell} | {pd:+.{d}f} | {says} | INCOMPLETE | — | — | — |")
            continue
        if pd == 0:
            same = "—"
        elif round(c.diff, d) == 0:  # +0.003 printed as +0.00 is no direction at all
            same = "tie"
        else:
            same = "yes" if _sign(c.diff) == _sign(pd) else "no"
        sig = f"{'yes' if e.holm_p < a.alpha else 'no'} (Holm p {_p(e.holm_p)})"
        agree = [_sign(te.comparison.diff) == _sign(te.published_diff) for t in tasks
                 if (te := a.entries[(cell, t)]).published_diff and te.comparison is not None]
        share = f"{sum(agree)} of {len(agree)}" if agree else "—"
        rows.append(f"| {cell} | {pd:+.{d}f} | {says} | {_num(c.diff, d, True)} | {same} | {sig} "
                    f"| {share} |")
    if not rows:
        return ["", f"Published direction: no cell has a published {label(m)} beside its baseline's."]
    return ["", f"#### Published direction vs this run ({label(m)})", "",
            "The published numbers come from the papers' setting (BERT-base, Wiki1M + Flickr30k, "
            "real STS), which this profile does not reproduce; their values are not comparable, "
            f"only the direction of each effect. Published Δ = the paper's cell − its {a.baseline}.",
            "",
            f"| cell | published Δ | paper: vs {a.baseline} | our Δ | same direction | "
            "significant here | tasks with the published sign |", "|---" * 7 + "|", *rows]


CSV_FIELDS = (
    "cell", "metric", "role", "status", "n", "missing_seeds", "mean", "std", "diff", "student_p",
    "significant", "welch_p", "paired_p", "n_paired", "holm_p", "hedges_g", "ci_low", "ci_high",
    "published", "gap", "sd_pooled", "detectable_student", "detectable_paired", "published_diff",
)


def _f(x: float | None) -> str:
    return "" if x is None else repr(float(x))  # repr round-trips exactly; nan -> 'nan'


def to_csv(a: TableAnalysis) -> str:
    """Long form: one row per cell x metric with every statistic, then one column per seed."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CSV_FIELDS, *(f"seed_{s}" for s in a.seeds)])
    for cell in a.cells:
        st = a.status[cell]
        for m in a.columns:
            e, c = a.entries[(cell, m)], a.entries[(cell, m)].comparison
            w.writerow([
                cell, m, "baseline" if cell == a.baseline else "variant",
                "complete" if st.complete else "incomplete", len(e.values),
                ";".join(map(str, st.missing_seeds)), _f(e.mean), _f(e.std),
                _f(c and c.diff), _f(c and c.t_student_p), "" if c is None else c.significant,
                _f(c and c.welch_p), _f(c and c.paired_p), "" if c is None else c.n_paired,
                _f(e.holm_p if c else None), _f(c and c.hedges_g), _f(c and c.ci_low),
                _f(c and c.ci_high), _f(None if a.directions_only else e.published), _f(e.gap),
                _f(c and c.sd_pooled), _f(c and c.detectable_student),
                _f(c and c.detectable_paired), _f(e.published_diff),
                *(_f(e.values.get(s)) for s in a.seeds),
            ])
    return buf.getvalue()
