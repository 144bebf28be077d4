"""Reproduce a paper table: every cell x seed plus the baseline, on Ray Tune, into MLflow.

    python -m orchestrator.ablate --grid table3                 # demo profile on this machine
    python -m orchestrator.ablate --grid table3 --profile paper --address auto --gpus-per-trial 1
    python -m orchestrator.ablate --grid table3 --cells KDMCSE --seeds 0 1  # some cells (+ baseline)
    python -m orchestrator.ablate --grid table3 --resume        # only the missing (cell, seed) runs
    python -m orchestrator.ablate --grid table3 --dry-run       # the runs, arrays and resources
    python -m orchestrator.ablate --grid table3 --dry-run --explain  # where each setting came from
    python -m orchestrator.ablate --list

The runs train as vectorised arrays (``--array-size``): one Tune trial per array (a Ray Train
run when it spans several workers), one MLflow child run per (cell, seed). Everything that can be checked is checked before
Ray starts: the grid, the profile, every run's config, the data, the resources, the tracking store.
"""

from __future__ import annotations

import argparse
import sys

from orchestrator import cli
from trainables.runtime.checks import SEED, Number
from trainables.runtime.command_line import option


def parser() -> argparse.ArgumentParser:
    p = cli.parser("orchestrator.ablate", __doc__)
    p.add_argument("--grid", help="a table in search_spaces/ (see --list), or a .py file with GRID")
    p.add_argument("--list", action="store_true", help="list (and check) the grids, one line each")
    p.add_argument("--seeds", type=option(SEED), nargs="+",
                   help="override the grid's seeds (default 0-4)")
    p.add_argument("--cells", nargs="+", metavar="CELL",
                   help="run only these cells (and the baseline); a later --resume of more cells "
                        "or seeds extends the same table")
    p.add_argument("--gpu-type", default=None,
                   help="--dry-run: the GPU the cost estimate is for (A10G, A100-40GB, A100-80GB, H100, "
                        "H200; default A10G, the cluster file's). The paper profile always gets one")
    p.add_argument("--mfu", type=option(Number(lo=0, hi=1, lo_open=True)), default=None,
                   help="--dry-run: the share of the GPU's dense peak (TF32 for fp32 runs, bf16 for bf16 "
                        "runs) assumed where no rate in the plan's precision is measured (default 0.25)")
    p.add_argument("--rates", nargs="+", default=[], metavar="JSON",
                   help="--dry-run: bench/gpu_suite.py --json reports whose measured rates the cost "
                        "estimate uses (bench/rates/*.json are read too)")
    p.add_argument("--explain", action="store_true",
                   help="with --dry-run: for every cell, each setting that differs from its "
                        "default, its value and the layer that set it")
    cli.add_campaign_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.explain and not args.dry_run:
        p.error("--explain goes with --dry-run")
    if (args.gpu_type or args.mfu is not None or args.rates) and not args.dry_run:
        p.error("--gpu-type, --mfu and --rates price a plan: they go with --dry-run")
    if args.list:
        return cli.guarded(_list)
    if not args.grid:
        p.error("--grid NAME is required (see --list)")
    return cli.guarded(lambda: _run(args))


def _list() -> int:
    from orchestrator.spec.registry import list_text

    print(list_text())
    return 0


def _run(args: argparse.Namespace) -> int:
    from orchestrator.analysis.cost import DEFAULT_GPU, DEFAULT_MFU
    from orchestrator.run.campaign import Campaign, run_table
    from orchestrator.run.dry_run import (
        cost_estimate,
        describe,
        dry_run_arrays,
        explain,
        profile_notes,
        resume_preview,
    )
    from orchestrator.run.preflight import check_campaign, check_demo_fit
    from orchestrator.spec.grids import check_seeds, grid_spec
    from orchestrator.spec.plan import plan_id, plan_runs, plan_summary, profile_tags
    from orchestrator.spec.registry import load_grid
    from trainables.config.profiles import profile_overrides, transfer_layer

    opts = cli.options(args)
    grid = load_grid(args.grid)
    seeds = list(args.seeds) if args.seeds else list(grid.seeds)
    where = "--seeds" if args.seeds else f"grid {grid.name}: seeds"
    seeds_checked = check_seeds(seeds, where, least=2)  # names --seeds before the grid does
    profile_name, prof = profile_overrides(opts.profile)
    if prof.get("data.demo"):
        check_demo_fit(grid, args.cells)
    members = plan_runs(grid, opts.profile, args.seeds, args.cells,
                        seeds_from="--seeds" if args.seeds else f"grid {grid.name} seeds")
    pre = check_campaign(members, opts, [seeds_checked], dry_run=args.dry_run,
                         baseline=grid.baseline)  # before Ray or MLflow
    array_keys = pre.array_keys
    cells = [c.name for c in grid.cells if args.cells is None or c.name in args.cells
             or c.name == grid.baseline]
    spec = grid_spec(grid) | {"seeds": seeds, "cells": cells, "demo": bool(prof.get("data.demo")),
                              "warnings": list(pre.warnings), "one_by_one": pre.one_by_one}
    # the caption-image store each cell read, named in the report
    spec["stores"] = {m.cell: ("generated demo corpus" if m.run.data.demo else m.run.data.pairs)
                      for m in members}
    if grid.transfer:  # how the runs evaluate TR on this profile, or why they do not
        modes = sorted({m.run.transfer for m in members} - {None})
        spec |= {"transfer_mode": "/".join(modes) or None,
                 "transfer_note": None if modes else transfer_layer(opts.profile)[1]}
    pid = plan_id("table", grid.name, members, profile_name)
    kind = "demo" if prof.get("data.demo") else profile_name
    campaign = Campaign("table", grid.name, f"{grid.name} ({kind})", pid, tuple(members), spec,
                        {"mmemb.grid": grid.name, **profile_tags(opts.profile)},
                        plan_summary(members, profile_name, opts.profile))
    if args.dry_run:
        arrays, slots = dry_run_arrays(members, array_keys, grid.name, opts)
        if args.resume:  # what is done, and only what would train
            done, said = resume_preview(campaign, opts)
            print(said)
            arrays = [t for p in arrays if (t := p.without(done)) is not None]
        print(f"{grid.title}\n{len(members)} runs ({len(cells)} cells x {len(seeds)} seeds) in "
              f"{len(arrays)} array{'s' * (len(arrays) != 1)}, up to {slots} at once"
              f"{'' if not opts.address else ' (on the cluster: as --max-concurrent allows)'}")
        print(describe(arrays))
        for note in profile_notes(members, opts.profile):
            print(note)
        if not prof.get("data.demo") or args.gpu_type or args.rates or args.mfu is not None:
            print(cost_estimate(arrays, pre.total_steps, opts.gpus_per_trial, opts.max_concurrent,
                                args.gpu_type or DEFAULT_GPU,
                                DEFAULT_MFU if args.mfu is None else args.mfu, args.rates))
        if args.explain:
            print(explain(members, pre.runs))
        print("\n".join(f"checked: {line}" for line in pre.checked))
        if grid.transfer and not spec["transfer_mode"]:
            print(f"transfer tasks (TR) {spec['transfer_note']}")
        if pre.not_here:  # listed and priced above; the refusal a real run would meet here
            print(f"error: this plan does not run here (listed and priced above, nothing "
                  f"started): {pre.not_here}", file=sys.stderr)
            return 2
        print("dry run: everything checked, nothing started")
        return 0
    return run_table(campaign, opts, array_keys)


if __name__ == "__main__":
    from trainables.runtime.command_line import exit_now

    cli.quiet_env()
    exit_now(main())  # no teardown of torch, Ray, MLflow: ~3 s
