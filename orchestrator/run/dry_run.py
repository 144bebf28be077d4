"""The dry run of a campaign: what it would run, where each setting comes from, what it would cost.

``--dry-run`` (``orchestrator.ablate``, ``orchestrator.calibrate``) checks everything a real run
checks (``preflight.check_campaign``), then prints instead of starting: the arrays the campaign
would pack and how many run at once (joining a cluster for a moment with ``--address``), each
array's members, the notes of a profile's settings that not every cell takes, the GPU cost
estimate, with ``--resume`` the runs a resume would reuse, and with ``--explain`` the layer that
set each setting. Nothing here starts Ray for good, writes to MLflow or trains.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.run.campaign import Campaign, noted
from orchestrator.run.options import Options
from orchestrator.run.resources import local_resources
from orchestrator.spec.plan import ArrayPlan, RunPlan, pack


def dry_run_arrays(members: Sequence[RunPlan], array_keys: Mapping[str, str], name: str,
                   opts: Options) -> tuple[list[ArrayPlan], int]:
    """The arrays a campaign would run and how many at once, without starting anything (the
    resources were checked against this machine by ``preflight.check_campaign``)."""
    from orchestrator.run.preflight import array_resources
    from trainables.runtime import shipping

    for line in shipping.check():  # refused here what the run's workers would not get
        print(f"checked: {line}")
    res, _ = array_resources(opts, members)
    if opts.address:
        slots, res = cluster_slots(opts, members, res)
    else:
        slots = res.concurrency(local_resources())
    arrays = pack(members, array_keys, name, opts.storage, opts.cpus_per_trial, res.gpus_per_trial,
                  opts.max_failures, opts.array_size, slots)
    return noted(arrays), slots


def resume_preview(campaign: Campaign, opts: Options) -> tuple[dict[str, str], str]:
    """``--resume --dry-run``: the finished runs a resume would reuse (trial key -> run id) and
    one line naming the parent it continues or extends; reads the store, writes nothing. Raises
    the refusal a real ``--resume`` would meet."""
    from orchestrator.run.resume import find_parent
    from orchestrator.tracking.client import Tracker

    try:
        tracker = Tracker(opts.tracking_uri, create=False)
    except ValueError as e:
        raise ValueError(f"--resume: nothing to resume: {e}") from None
    found = find_parent(tracker, campaign, opts.resume, quiet=True)  # as the real resume does
    parent = found.run_id if found is not None else None
    keys = {m.key for m in campaign.members}
    done = {k: v for k, v in tracker.finished_runs(parent).items() if k in keys}
    how = "extend" if found is not None and found.extended else "continue"
    by_cell: dict[str, list[str]] = {}
    for m in campaign.members:
        if m.key in done:
            by_cell.setdefault(m.cell, []).append(str(m.seed))
    listed = "; ".join(f"{c} seed{'s' * (len(v) != 1)} {' '.join(v)}" for c, v in by_cell.items())
    return done, (f"--resume would {how} parent run {parent}: {len(done)} of {len(keys)} runs "
                  f"done ({listed or 'none'}), {len(keys) - len(done)} would train (below)")


def cluster_slots(opts: Options, members: Sequence[RunPlan], res: Any) -> tuple[int, Any]:
    """The dry run with --address: joins the cluster for a moment and counts the arrays at once
    as the real run will (its GPU default, its nodes now), so both plan the same packing; a
    cluster that does not answer leaves --max-concurrent (or 1), said in one note."""
    import ray

    from orchestrator.run.preflight import array_resources
    from orchestrator.run.resources import cluster_nodes
    from trainables.runtime.ray_env import init_ray, root_cause

    try:  # (an address nobody answers was refused before the plan: cli.options)
        init_ray(opts.address, log_to_driver=False)
    except Exception as e:
        print(f"note: the Ray cluster at {opts.address} did not answer ({root_cause(e)}); the "
              f"plan below assumes {opts.max_concurrent or 1} array(s) at a time", file=sys.stderr)
        return opts.max_concurrent or 1, res
    try:
        gpus = opts.gpus_per_trial
        if gpus is None:
            gpus = 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0
        res, _ = array_resources(opts, members, gpus)
        nodes = cluster_nodes()
        slots = res.concurrency(nodes, True)
        print(f"cluster {opts.address}: {len(nodes)} node(s) now, {slots} array(s) at a time "
              "(an autoscaling cluster may add nodes once the run asks)", flush=True)
        return slots, res
    finally:
        ray.shutdown()


def describe(arrays: Sequence[ArrayPlan]) -> str:
    """The dry run's listing: every array, its members and what it asks for."""
    lines = []
    for t in arrays:
        res = f"{t.cpus:g} CPU" + (f" + {t.gpus:g} GPU" if t.gpus else "")
        lines.append(f"{t.label}  [{res} per worker, {t.members[0].run.num_workers} worker(s)]")
        if t.note:
            lines.append(f"  {t.note}")
        for m in t.members:
            lines.append(f"  {m.key:<36s} {m.run.objective.method:<7s} {m.config_hash}")
    return "\n".join(lines)


RATES_DIR = Path(__file__).resolve().parents[2] / "bench" / "rates"
"""bench/gpu_suite.py reports kept with the repository: measured rates the cost estimate prefers"""


def cost_estimate(arrays: Sequence[ArrayPlan], steps: Mapping[str, int], gpus_per_trial: float | None,
                  concurrent: int | None, gpu: str, mfu: float, rates: Sequence[str] = ()) -> str:
    """The dry run's cost lines (``orchestrator.analysis.cost``) for these arrays, each run's
    steps from the schedule at its data's real sizes (``preflight.check_data``)."""
    from transformers import AutoConfig

    from orchestrator.analysis.cost import Encoder, Member, estimate, format_estimate, read_measured
    from trainables.models.pretrained import resolve_encoder

    if gpus_per_trial == 0:
        return "cost: no GPU estimate (--gpus-per-trial 0 trains on CPUs)"
    shapes: dict[str, Encoder] = {}

    def shape(name: str, cache: str) -> Encoder:
        if name not in shapes:
            shapes[name] = Encoder.from_config(AutoConfig.from_pretrained(resolve_encoder(name, cache)))
        return shapes[name]

    members = [[Member(
        m.run.objective.method, m.run.batch_size, m.run.max_length, steps[m.key], m.run.eval_every,
        shape(m.run.encoder, m.run.data.cache_dir),
        tuple(shape(t, m.run.data.cache_dir) for t in m.run.text_teachers)
        if m.run.objective.method == "dalr" else (), m.run.final_eval, m.run.precision)
        for m in a.members] for a in arrays]
    files = [*rates, *sorted(str(f) for f in RATES_DIR.glob("*.json"))] if RATES_DIR.is_dir() else list(rates)
    est = estimate(members, gpu, gpus_per_trial or 1.0, concurrent, mfu,
                   [read_measured(f) for f in files])
    return format_estimate(est, assumed_gpus=gpus_per_trial is None)


def profile_notes(runs: Sequence[RunPlan], profile: str | None) -> list[str]:
    """The dry run's ``note:`` lines: one per setting a YAML profile names that not every cell
    takes, saying which cells take it, which keep their own (a cell's or the grid's value) and
    which do not read it (a method without that setting)."""
    from trainables.config.profiles import profile_layers
    from trainables.config.run_config import flatten
    from trainables.objectives.methods import setting_names

    name, values, layers = profile_layers(profile)
    if name in ("demo", "paper"):
        return []
    first: dict[str, RunPlan] = {}
    for r in runs:
        first.setdefault(r.cell, r)
    notes = []
    for key, value in values.items():
        if layers.get(key) != f"profile {name}":
            continue  # inherited from its base
        take, own, unread = [], [], []
        for cell, r in first.items():
            layer = r.origins.get(key)
            if key.startswith("objective.") and key[10:] not in setting_names(r.run.objective.method):
                unread.append(cell)
            elif layer == f"profile {name}" or flatten(r.run.to_dict()).get(key) == value:
                take.append(cell)
            else:
                v = flatten(r.run.to_dict()).get(key)
                own.append(f"{cell} ({v}, {layer or 'its cell'})")
        if own or unread:
            parts = [f"taken by {', '.join(take)}" if take else "taken by no cell"]
            parts += [f"kept by {', '.join(own)}"] if own else []
            parts += [f"not read by {', '.join(unread)} (no such setting)"] if unread else []
            notes.append(f"note: {key}={value} from profile {name}: {'; '.join(parts)}")
    return notes


def explain(runs: Sequence[RunPlan], lengths: Mapping[str, str] | None = None) -> str:
    """``--dry-run --explain``: per cell, every setting that differs from its field default, its
    value and the layer that set it (``trainables.config.profiles.explain_config``). A cell's runs differ
    only in their seed, so the seeds are listed once. ``lengths``: member key -> its run's steps,
    epochs, optimizer, precision and store (``preflight.DataCheck.runs``), said per cell."""
    from trainables.config.run_config import flatten

    lines = ["where each setting comes from (settings at their field default are not listed):"]
    by_cell: dict[str, list[RunPlan]] = {}
    for r in runs:
        by_cell.setdefault(r.cell, []).append(r)
    for cell, rs in by_cell.items():
        first = rs[0]
        values = flatten(first.run.to_dict())
        lines.append(f"{cell} (seeds {' '.join(str(r.run.seed) for r in rs)}):")
        if lengths and first.key in lengths:
            lines.append(f"  run: {lengths[first.key]}")
        for key, layer in first.origins.items():
            if key == "seed":
                continue
            shown = values[key]
            shown = ", ".join(map(str, shown)) if isinstance(shown, list) else str(shown)
            lines.append(f"  {key:<28s} {shown:<24s} {layer}")
        seed_layer = first.origins.get("seed")
        if seed_layer:
            lines.append(f"  {'seed':<28s} {'(per run)':<24s} {seed_layer}")
    return "\n".join(lines)
