"""Optuna search through Ray Tune, with seed noise in the selection, ended by a confirmation.

    python -m orchestrator.search --space kdmcse_search --num-samples 8
    python -m orchestrator.search --space dalr_search --profile paper --address auto --resume
    python -m orchestrator.search --space search_spaces/my_space.py --study-storage postgresql://...

1. **Rounds.** TPE asks a batch of configurations at once; each trains on ``--search-seeds``
   seeds, and all of them train as one array (one Tune trial). Halfway through the run the array
   keeps the better half of the configurations, judged on the mean STS-B dev of their seeds
   (successive halving inside the array: the pruned members leave it, so the freed compute is
   real), and the rest train to the end. Each configuration's value is its seeds' mean best dev.
2. **Finalists.** The best ``--finalists`` configurations train again on fresh seeds; the winner
   is the best mean over all its seeds, and the report says whether its margin over the
   runner-up is larger than the seed noise, or that the search could not tell them apart.
3. **Confirmation.** The winner and the baseline train on the space's five fresh seeds (one
   array), and the report tests the difference as a table does: selecting and reporting on the
   same runs would inflate the gain.

The study lives in an Optuna RDB storage (``--study-storage``, by default SQLite beside the
checkpoints): several drivers may attach to one study, and ``--resume`` continues it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from orchestrator import cli
from trainables.runtime.checks import SEED, count
from trainables.runtime.command_line import option

if TYPE_CHECKING:
    from orchestrator.run.rounds import SearchArgs

ROUND_SIZE = 8
"""configurations asked at once (one array per round on one device)"""


def parser() -> argparse.ArgumentParser:
    p = cli.parser("orchestrator.search", __doc__)
    p.add_argument("--space", help="a search in search_spaces/ (see --list), or a .py file with SPACE")
    p.add_argument("--list", action="store_true", help="list (and check) the searches")
    p.add_argument("--num-samples", type=option(count(2, "a search compares configurations")),
                   help="configurations to try (default: the space's)")
    p.add_argument("--search-seeds", type=option(SEED), nargs="+", default=[0, 1],
                   help="seeds every configuration trains on during the search (default 0 1)")
    p.add_argument("--finalists", type=option(count(2, "the winner and a runner-up")), default=3,
                   help="best configurations re-trained on --finalist-seeds (default 3)")
    p.add_argument("--finalist-seeds", type=option(SEED), nargs="+", default=[10, 11, 12])
    p.add_argument("--confirm-seeds", type=option(SEED), nargs="+",
                   help="fresh seeds for the confirmation against the baseline (default: the space's five)")
    p.add_argument("--seed", type=option(SEED), default=0, help="seed of the TPE sampler")
    p.add_argument("--round-size", type=option(count(1)), default=ROUND_SIZE,
                   help=f"configurations asked at once (default {ROUND_SIZE})")
    p.add_argument("--no-halving", action="store_true", help="train every configuration to the end")
    p.add_argument("--study-storage",
                   help="Optuna RDB URL shared by several drivers (default: sqlite beside --storage)")
    cli.add_campaign_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.list:
        return cli.guarded(_list)
    if not args.space:
        p.error("--space NAME is required (see --list)")
    return cli.guarded(lambda: _run(args))


def _list() -> int:
    from orchestrator.spec.registry import list_text

    print(list_text(grids=False))
    return 0


def search_args(args: argparse.Namespace, space) -> SearchArgs:
    """The search's own options, refused at once when they make no sense (never after the search)."""
    from orchestrator.spec.grids import check_seeds

    def seeds(name: str, values: Sequence[int], least: int) -> tuple[int, ...]:
        check_seeds(values, name, least)
        return tuple(values)

    n = args.num_samples if args.num_samples is not None else space.num_samples
    if n < 2:
        raise ValueError(f"--num-samples {n} must be >= 2 (a search compares configurations)")
    if args.finalists < 2:
        raise ValueError(f"--finalists {args.finalists} must be >= 2 (the winner and a runner-up)")
    if args.round_size < 1:
        raise ValueError(f"--round-size {args.round_size} must be >= 1")
    search = seeds("--search-seeds", args.search_seeds, 1)
    final = seeds("--finalist-seeds", args.finalist_seeds, 1)
    confirm = seeds("--confirm-seeds", args.confirm_seeds or space.confirm_seeds, 2)
    if set(confirm) & (set(search) | set(final)):
        raise ValueError(f"--confirm-seeds {list(confirm)} must be fresh: they overlap the search "
                         "or finalist seeds (selecting and reporting on the same seeds inflates the gain)")
    from orchestrator.run.rounds import SearchArgs

    return SearchArgs(n, search, min(args.finalists, n), final, confirm, args.seed,
                      args.round_size, not args.no_halving, args.study_storage)


def _run(args: argparse.Namespace) -> int:
    import optuna

    from orchestrator.run.campaign import Campaign, Session
    from orchestrator.run.preflight import check_campaign
    from orchestrator.run.rounds import (
        Planner,
        check_study,
        default_study,
        finish,
        open_study_storage,
        rounds,
        rung_of,
    )
    from orchestrator.spec.plan import plan_id, plan_summary, profile_tags
    from orchestrator.spec.registry import load_space
    from orchestrator.spec.spaces import searched_keys
    from orchestrator.spec.validate import validate_space
    from orchestrator.tracking.uris import masked
    from trainables.config.profiles import build_config, profile_overrides

    opts = cli.options(args)
    space = load_space(args.space)
    sa = search_args(args, space)
    profile_name, prof = profile_overrides(opts.profile)

    def build(overrides):
        return build_config(opts.profile, overrides=dict(overrides))

    validate_space(space, build=build, exhaustive=True, profile=opts.profile)  # every option
    planner = Planner(space, opts.profile, build)
    probe = [planner.member("probe", {}, sa.search_seeds[0], "probe"),
             *planner.confirmation({}, sa.confirm_seeds)]
    data = check_campaign(probe, opts,  # everything, before Ray or MLflow
                          varying=searched_keys(space, opts.profile))
    pid = plan_id("search", space.name, probe, profile_name, sa.num_samples, sa.search_seeds, sa.seed)
    storage_url = sa.study_storage or default_study(opts.storage)
    data = replace(data, checked=(*data.checked, check_study(storage_url)))
    spec = planner.confirm_spec(sa.confirm_seeds, bool(prof.get("data.demo"))) | {
        "warnings": list(data.warnings), "one_by_one": data.one_by_one}
    summary = plan_summary(probe, profile_name, opts.profile, num_samples=sa.num_samples,
                           search_seeds=list(sa.search_seeds), sampler_seed=sa.seed)
    campaign = Campaign("search", space.name, f"search {space.name}", pid, (), spec,
                        {"mmemb.space": space.name, **profile_tags(opts.profile)},
                        summary)
    if args.dry_run:
        print(f"{space.title}\n{sa.num_samples} configurations x {len(sa.search_seeds)} seeds in "
              f"rounds of {sa.round_size}, then {sa.finalists} finalists x {len(sa.finalist_seeds)} "
              f"seeds, then the winner and the baseline on seeds {list(sa.confirm_seeds)}; study "
              f"{masked(storage_url)}")
        if sa.halving:  # the run says it again if it happens; the plan should not promise more
            print(f"(finalists: the best {sa.finalists} configurations that complete their round; "
                  "one pruned by successive halving is not eligible, so there may be fewer)")
        print("\n".join(f"checked: {line}" for line in data.checked))
        print("dry run: everything checked, nothing started")
        return 0
    steps = data.total_steps[probe[0].key]
    with Session(campaign, opts, {}) as session:
        print(f"{space.title}\n{sa.num_samples} configurations x {len(sa.search_seeds)} seeds; "
              f"MLflow parent {session.parent} at {masked(session.tracker.uri)}; study "
              f"{masked(storage_url)}",
              flush=True)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            study_name=f"{space.name}-{pid}", storage=open_study_storage(storage_url),
            direction="maximize", load_if_exists=True,
            sampler=optuna.samplers.TPESampler(seed=sa.seed, constant_liar=True))
        rung = rung_of(steps, planner.eval_every) if sa.halving else None
        status = rounds(session, study, planner, sa, pid, rung)
        if status is not None:
            return status
        return finish(session, study, planner, sa, pid, spec)



if __name__ == "__main__":
    from trainables.runtime.command_line import exit_now

    cli.quiet_env()
    exit_now(main())  # no teardown of torch, Ray, MLflow: ~3 s
