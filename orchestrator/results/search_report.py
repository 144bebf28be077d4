"""What a search found: the winner, whether it beat the runner-up by more than seed noise, every
configuration tried, and Optuna's plots; written beside the report and mirrored to MLflow."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.analysis.stats import compare
from orchestrator.analysis.tables import p_text


@dataclass(frozen=True)
class Verdict:
    """The winner among the finalists and how its margin compares with the seed noise."""

    winner: int
    runner_up: int
    means: Mapping[int, float]
    ns: Mapping[int, int]
    seed_std: float
    """pooled std of a configuration's dev score over seeds (the noise every mean carries)"""
    margin: float
    se: float
    """standard error of the winner - runner-up difference, from the pooled seed std"""
    welch_p: float

    @classmethod
    def of(cls, seed_values: Mapping[int, Sequence[float]]) -> Verdict:
        """Winner = best mean over all its seeds; needs two configurations with values."""
        vals = {n: list(v) for n, v in seed_values.items() if v}
        if len(vals) < 2:
            raise ValueError("a verdict needs two finalists with results")
        means = {n: statistics.fmean(v) for n, v in vals.items()}
        order = sorted(means, key=lambda n: -means[n])
        w, r = order[0], order[1]
        dof = sum(len(v) - 1 for v in vals.values())
        pooled = math.sqrt(sum((len(v) - 1) * statistics.variance(v) for v in vals.values()
                               if len(v) > 1) / dof) if dof else math.nan
        se = pooled * math.sqrt(1 / len(vals[w]) + 1 / len(vals[r]))
        p = compare(vals[w], vals[r]).welch_p
        return cls(w, r, means, {n: len(v) for n, v in vals.items()}, pooled,
                   means[w] - means[r], se, p)

    @property
    def distinguished(self) -> bool:
        """The margin is beyond two standard errors of the difference."""
        return math.isfinite(self.se) and self.se > 0 and self.margin > 2 * self.se

    def sentence(self) -> str:
        head = (f"The winner (trial {self.winner}, mean STS-B dev {self.means[self.winner]:.2f} over "
                f"{self.ns[self.winner]} seeds) beat the runner-up (trial {self.runner_up}, "
                f"{self.means[self.runner_up]:.2f} over {self.ns[self.runner_up]} seeds) by "
                f"{self.margin:.2f} points; the seed std is {self.seed_std:.2f}, so the margin is "
                f"{self.margin / self.se if self.se else math.inf:.1f} standard errors of the "
                f"difference (Welch p {self.welch_p:.2f}).")
        if self.distinguished:
            return head + " The winner is distinguishable from the runner-up."
        return (head + " The search could NOT distinguish them: treat the finalists as tied, and "
                "read the confirmation below as a test of the winner against the baseline only.")


def against_baseline(scores: Mapping[str, Mapping[int, Mapping[str, float]]], best: str,
                     baseline: str, seeds: Sequence[int]) -> str:
    """One sentence: is the confirmed winner at least as good as the baseline on the fresh seeds
    (STS Avg), said plainly either way. The winner and the baseline train on the same seeds, so
    the verdict is the paired t-test's over those seeds (a seed fixes the data order and the
    initialisation of both runs); the papers' unpaired Student test is given beside it. Where
    the per-seed differences are all equal (no paired test), the Student test decides."""
    w = [scores.get(best, {}).get(s, {}).get("avg") for s in seeds]
    b = [scores.get(baseline, {}).get(s, {}).get("avg") for s in seeds]
    if any(v is None or not math.isfinite(v) for v in (*w, *b)):
        return (f"**Against {baseline}:** the confirmation is incomplete (see the failed runs), "
                "so the search's winner is not compared with the baseline.")
    c = compare(dict(zip(seeds, w, strict=True)), dict(zip(seeds, b, strict=True)))
    paired = c.n_paired >= 2 and math.isfinite(c.paired_p)
    p = c.paired_p if paired else c.t_student_p
    significant = math.isfinite(p) and p < c.alpha
    tests = (f"paired t-test over the {c.n_paired} matched seeds p {p_text(c.paired_p)}; unpaired "
             f"Student p {p_text(c.t_student_p)}" if paired else
             f"Student p {p_text(c.t_student_p)}")
    figures = (f"{c.mean_variant:.1f} ± {c.std_variant:.1f} against {baseline}'s "
               f"{c.mean_baseline:.1f} ± {c.std_baseline:.1f} on STS Avg over fresh seeds "
               f"{', '.join(map(str, seeds))} (Δ {c.diff:+.2f}, {tests})")
    if c.diff >= 0:
        verdict = "significantly better" if significant else "not significantly better"
        return f"**Against {baseline}:** the winner is at least as good: {figures}, {verdict}."
    worse = "significantly" if significant else "though not significantly"
    return (f"**Against {baseline}:** the winner is WORSE than the baseline, {worse}: {figures}. "
            "The search did not find a configuration that beats the baseline.")


def trials_table(study, seed_values: Mapping[int, Sequence[float]]) -> str:
    """Every configuration of the study: state, params, mean ± std dev over its seeds."""
    rows = ["| trial | state | mean dev | seeds | params |", "|---|---|---|---|---|"]
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        vals = list(seed_values.get(t.number) or t.user_attrs.get("seed_values") or [])
        mean = f"{statistics.fmean(vals):.2f}" if vals else "—"
        if len(vals) > 1:
            mean += f" ± {statistics.stdev(vals):.2f}"
        params = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(t.params.items()))
        label = f"{t.number} (the profile's own)" if t.user_attrs.get("start") else str(t.number)
        rows.append(f"| {label} | {t.state.name.lower()} | {mean} | {len(vals)} | {params} |")
    return "\n".join(rows)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def plots(study, outdir: Path) -> dict[str, str]:
    """Optuna's own matplotlib plots; name -> file, or name -> why it could not be drawn."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ov

    out = {}
    for name, fn in (("optimization_history", ov.plot_optimization_history),
                     ("param_importances", ov.plot_param_importances),
                     ("parallel_coordinate", ov.plot_parallel_coordinate)):
        path = outdir / f"search_{name}.png"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = fn(study)
            fig = (ax.flat[0] if hasattr(ax, "flat") else ax).figure
            fig.set_size_inches(9, 5)
            fig.tight_layout()
            fig.savefig(path, dpi=110)
            plt.close(fig)
            out[name] = path.name
        except Exception as e:  # too few finished trials, a single parameter, ...
            out[name] = f"not drawn ({type(e).__name__}: {str(e)[:120]})"
    return out


def write(session, study, planner, finalists, seed_values: Mapping[int, Sequence[float]],
          verdict: Verdict, pid: str) -> tuple[str, str]:
    """Write search.md, study.csv and the plots beside the report, upload them; -> (the verdict
    against the baseline, the report's first line; the Markdown section it ends with)."""
    from orchestrator.results.table_report import report_dir

    outdir = report_dir(session.tracker, session.campaign.name, session.parent)
    outdir.mkdir(parents=True, exist_ok=True)
    win = next(t for t in finalists if t.number == verdict.winner)
    best = planner.overrides(win.params)
    drawn = plots(study, outdir)
    spec = session.campaign.spec
    scores, _ = session.tracker.scores(session.parent)
    lead = against_baseline(scores, spec["cells"][1], spec["baseline"], spec["seeds"])
    lines = [
        "", f"## Search: {planner.space.title}", "",
        lead, "",
        f"Best configuration: trial {win.number}", "",
        *[f"- `{k}` = {_fmt(v)}" for k, v in sorted(best.items())], "",
        verdict.sentence(), "",
        "### Finalists (search seeds + finalist seeds)", "",
        "| trial | mean dev | seeds | values |", "|---|---|---|---|",
        *[f"| {t.number} | {statistics.fmean(seed_values[t.number]):.2f} | "
          f"{len(seed_values[t.number])} | {', '.join(f'{v:.2f}' for v in seed_values[t.number])} |"
          for t in finalists if seed_values.get(t.number)],
        "", "### Every configuration", "", trials_table(study, seed_values), "",
        "### Plots", "", *[f"- {k}: {v}" for k, v in drawn.items()], "",
    ]
    if session.campaign.spec.get("demo"):
        lines += ["Demo profile: these are demo-world numbers; they show that the search works, "
                  "not which setting is best on the papers' data.", ""]
    md = "\n".join(lines)
    (outdir / "search.md").write_text(md)
    study.trials_dataframe().to_csv(outdir / "study.csv", index=False)
    try:
        for f in ["search.md", "study.csv", *[v for v in drawn.values() if v.endswith(".png")]]:
            session.tracker.log_artifact_file(session.parent, outdir / f)
    except Exception as e:  # never lose the search's result to an artifact store
        print(f"warning: search artifacts not uploaded ({type(e).__name__}); they are in {outdir}")
    return lead, md
