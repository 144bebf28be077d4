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
  (``orchestrator.analysis.stats.seeds_needed``), beside a range of seed stds spanning the published ones.

The report (calibration.md, calibration.json, calibration.png) goes beside the MLflow store and
onto the parent run, with headline metrics; the printed report also holds the positive control
as a table on its seeds.
"""


from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

import numpy as np

from orchestrator import cli
from orchestrator.analysis.calibration import BASELINE, CONTROL, DRAWS, calibrate
from orchestrator.tracking.uris import masked
from trainables.runtime.checks import POSITIVE, SEED, Number, count
from trainables.runtime.command_line import option


def parser() -> argparse.ArgumentParser:
    p = cli.parser("orchestrator.calibrate", __doc__)
    p.add_argument("--runs", type=option(count(4, "two groups of two seeds")), default=20,
                   help="MCSE runs (seeds first-seed..): the A/A pool (default 20)")
    p.add_argument("--control-runs", type=option(count(0)), default=10,
                   help="SimCSE runs on the first of those seeds: the positive control (default 10; "
                        "0 skips it)")
    p.add_argument("--first-seed", type=option(SEED), default=0)
    p.add_argument("--group-size", type=option(count(2, "a t-test needs two seeds per group")),
                   default=5, help="seeds per cell of a table (default 5)")
    p.add_argument("--family-cells", type=option(count(0)), default=3,
                   help="cells besides the baseline in a table-wide A/A family (default 3, Table 3)")
    p.add_argument("--draws", type=option(count(100)), default=DRAWS,
                   help=f"resampled splits per rate (default {DRAWS:,})")
    p.add_argument("--alpha", type=option(Number(0, 1, lo_open=True, hi_open=True)), default=0.05)
    p.add_argument("--deltas", type=option(POSITIVE), nargs="+", default=[0.4, 0.8, 1.3],
                   help="true differences (points) to size seeds for (default: the published gaps)")
    cli.add_campaign_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
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
    from orchestrator.results.calibration_report import (
        headline_metrics,
        log_metrics,
        to_markdown,
        write_files,
    )
    from orchestrator.results.table_report import report_dir
    from orchestrator.run.campaign import Campaign, Session
    from orchestrator.run.dry_run import describe, dry_run_arrays
    from orchestrator.run.preflight import check_campaign
    from orchestrator.spec.grids import grid_spec
    from orchestrator.spec.plan import plan_id, plan_runs, plan_summary, profile_tags
    from orchestrator.spec.registry import load_grid
    from trainables.config.profiles import profile_overrides

    _check(args)
    opts = cli.options(args)
    grid = load_grid("control_positive")
    profile_name, prof = profile_overrides(opts.profile)
    seeds = list(range(args.first_seed, args.first_seed + args.runs))
    ctrl = set(seeds[: args.control_runs])
    members = [m for m in plan_runs(grid, opts.profile, seeds)
               if m.cell == BASELINE or m.seed in ctrl]
    pre = check_campaign(members, opts)  # everything, before Ray or MLflow
    array_keys = pre.array_keys
    demo = bool(prof.get("data.demo"))
    spec = grid_spec(grid) | {"name": "calibration", "seeds": sorted(ctrl) or seeds[: args.group_size],
                              "cells": [BASELINE, CONTROL] if ctrl else [BASELINE], "demo": demo,
                              "warnings": list(pre.warnings)}
    pub = grid.published
    direction = int(np.sign(pub[CONTROL]["avg"] - pub[BASELINE]["avg"]))
    settings = [args.runs, args.control_runs, args.first_seed]
    pid = plan_id("calibration", grid.name, members, profile_name, *settings)
    kind = "demo" if demo else profile_name
    runs_line = (f"{args.runs} {BASELINE} runs (seeds {seeds[0]}-{seeds[-1]})"
                 + (f" and {len(ctrl)} {CONTROL} runs on the first {len(ctrl)} of those seeds"
                    if ctrl else "") + f", profile {kind}.")
    if args.dry_run:
        arrays, slots = dry_run_arrays(members, array_keys, "calibration", opts)
        print(f"calibration: {runs_line}\n{len(members)} runs in {len(arrays)} "
              f"array{'s' * (len(arrays) != 1)}, up to "
              f"{slots} at once")
        print(describe(arrays))
        print("\n".join(f"checked: {line}" for line in pre.checked))
        print("dry run: everything checked, nothing started")
        return 0
    campaign = Campaign("calibration", "calibration", f"calibration ({kind})", pid,
                        tuple(members), spec, {"mmemb.grid": "calibration",
                                               **profile_tags(opts.profile)},
                        plan_summary(members, profile_name, opts.profile, runs=args.runs,
                                     control_runs=args.control_runs, first_seed=args.first_seed))
    with Session(campaign, opts, array_keys) as s:
        if not s.resumed or s.extended:
            s.tracker.log_artifact_text(s.parent, "grid.json", json.dumps(spec, indent=1))
        print(f"calibration: {runs_line}\nMLflow parent run {s.parent} at {masked(s.tracker.uri)}", flush=True)
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
            log_metrics(s.tracker, s.parent, headline_metrics(cal))
        except Exception as e:  # the files on disk and the printed report do not depend on MLflow
            print(f"error: could not store the calibration in MLflow ({type(e).__name__}: {e}); it is "
                  f"in {outdir}", file=sys.stderr)
        rc = s.finish(spec, extra_md="\n" + md)
    print(f"calibration: {outdir}/calibration.md")
    return rc


if __name__ == "__main__":
    from trainables.runtime.command_line import exit_now

    cli.quiet_env()
    exit_now(main())  # no teardown of torch, Ray, MLflow: ~3 s
