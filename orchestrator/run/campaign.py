"""One campaign runner for tables and searches: Ray, MLflow, Tune, the arrays, the report.

``run_table(campaign, options, array_keys)`` is what ``orchestrator.ablate`` does after parsing
its arguments; ``orchestrator.search`` opens a :class:`Session` itself, runs its rounds and its
confirmation through ``Session.run``, and closes it the same way. A session owns, in order:

1. the resource check against this machine (before Ray starts, when no cluster is named);
2. the MLflow store (an unreachable server stops everything here, before Ray starts);
3. Ray (embedded, or joined with ``--address``), the GPU default, the wait for an autoscaling
   cluster's workers and the concurrency;
4. the parent run (a new one, or with ``--resume`` the latest of the same plan) and the offline
   journal that keeps results when MLflow stops answering mid-run;
5. per ``run``: the members still to train, packed into arrays, as one Tune experiment whose
   callbacks mirror every member into MLflow, print the live view and free placement groups;
6. the report, written beside the MLflow store and uploaded to the parent; a failed upload never
   hides the table: it is printed, kept on disk, and the parent says what failed.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.run.options import Options
from orchestrator.run.resources import (
    TRIAL_DRIVER_RESOURCES,
    Resources,
    local_resources,
    wait_for_resources,
)
from orchestrator.spec.plan import ArrayPlan, RunPlan, pack


@dataclass(frozen=True)
class Campaign:
    """What a session runs and how its parent run is named and tagged."""

    kind: str
    """'table' or 'search'"""
    name: str
    """the grid or search space"""
    parent_name: str
    plan_id: str
    members: tuple[RunPlan, ...]
    spec: Mapping[str, Any]
    """the report's spec (``orchestrator.results.report.grid_spec``), stored on the parent as grid.json"""
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    """What one ``Session.run`` gave: per member key, final scores, failures, pruning steps."""

    finals: dict[str, dict[str, Any]]
    failures: dict[str, str]
    pruned: dict[str, int]
    best_dev: dict[str, float] = field(default_factory=dict)
    """best STS-B dev of every member that reported one (pruned members included)"""
    interrupted: bool = False


class Session:
    def __init__(self, campaign: Campaign, opts: Options, array_keys: Mapping[str, str]):
        from orchestrator.tracking.client import Tracker
        from orchestrator.tracking.journal import Journal
        from trainables.ray_env import init_ray, storage_uri

        self.campaign, self.opts, self.array_keys = campaign, opts, dict(array_keys)
        if not opts.address:  # nothing can join the embedded Ray: refuse what cannot fit, now
            Resources(opts.cpus_per_trial, opts.gpus_per_trial or 0.0).check_fits(
                local_resources(), "this machine")
        self.storage = storage_uri(opts.storage)
        self.tracker = Tracker(opts.tracking_uri)
        init_ray(opts.address, log_to_driver=False)
        import ray

        gpus = opts.gpus_per_trial
        if gpus is None:
            gpus = 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0
        self.resources = Resources(opts.cpus_per_trial, gpus, opts.max_concurrent)
        if opts.address:
            wait_for_resources(self.resources, opts.wait_for_workers)
        else:
            self.resources.check_fits(ray.cluster_resources(), "the local Ray")
        self.autoscaling = bool(opts.address)
        self.slots = self.resources.concurrency(ray.cluster_resources(), self.autoscaling)
        self.parent, self.resumed = self.tracker.start_parent(
            campaign.parent_name, campaign.kind, campaign.plan_id, dict(campaign.tags),
            resume=opts.resume)
        local = Path(self.storage if "://" not in self.storage else "runs").resolve()
        self.journal = Journal(self.tracker, local / f"mlflow-journal-{campaign.plan_id}.jsonl")

    # --- running ---------------------------------------------------------------------------
    def run(self, members: Sequence[RunPlan], experiment: str,
            halving: tuple[tuple[int, ...], float] | None = None) -> Outcome:
        """Train the members not yet finished under this parent, as arrays, in one Tune run."""
        from ray import tune

        from orchestrator.run.live import LiveView
        from orchestrator.run.placement import cleanup_callback
        from orchestrator.run.trial import trial_fn
        from orchestrator.tracking.mirror import MlflowMirror

        done = self.tracker.finished_runs(self.parent)
        todo = [m for m in members if m.key not in done]
        if not todo:
            return Outcome({}, {}, {})
        opts = self.opts
        new = [m for m in members if m.key not in self.array_keys]
        if new:  # members planned after the session opened (a search's rounds)
            from orchestrator.run.preflight import check_data

            self.array_keys.update(check_data(new).array_keys)
        # Packed over *all* members, then thinned: a resumed array keeps its name (and so its
        # Train checkpoint) whenever none of its members finished.
        arrays = [t for t in (
            p.without(done) for p in pack(members, self.array_keys, self.campaign.name,
                                          self.storage, opts.cpus_per_trial,
                                          self.resources.gpus_per_trial, opts.max_failures,
                                          opts.array_size, self.slots, opts.keep_checkpoints,
                                          halving)) if t is not None]
        sizes = sorted({len(t.members) for t in arrays})
        print(f"{len(todo)} runs in {len(arrays)} array{'s' * (len(arrays) != 1)} of "
              f"{'-'.join(map(str, sizes))} member{'s' * (sizes[-1] != 1)}, up to "
              f"{min(self.slots, len(arrays))} at once", flush=True)
        mirror = MlflowMirror(arrays, self.journal, self.parent,
                              self.tracker.unfinished_runs(self.parent))

        def dirname(trial) -> str:
            return f"{arrays[trial.config['index']].name}-{trial.trial_id[-5:]}"

        tuner = tune.Tuner(
            tune.with_resources(tune.with_parameters(trial_fn, arrays=arrays),
                                TRIAL_DRIVER_RESOURCES),
            param_space={"index": tune.grid_search(list(range(len(arrays))))},
            tune_config=tune.TuneConfig(max_concurrent_trials=self.slots,
                                        trial_dirname_creator=dirname),
            run_config=tune.RunConfig(
                name=experiment, storage_path=self.storage, verbose=0,
                callbacks=[mirror, LiveView(arrays), cleanup_callback()],
                failure_config=tune.FailureConfig(max_failures=opts.max_failures),
            ),
        )
        tuner.fit()
        ended = set(mirror.finals) | set(mirror.failures) | set(mirror.pruned)
        return Outcome(mirror.finals, mirror.failures, mirror.pruned, mirror.best_dev,
                       interrupted=any(m.key not in ended for m in todo))

    # --- the end ---------------------------------------------------------------------------
    def finish(self, spec: Mapping[str, Any], extra_md: str = "") -> int:
        """Write the report (or say why not), end the parent, print where everything is."""
        from orchestrator.results.report import build_report, report_dir
        from orchestrator.results.views import print_links, share

        if self.journal.offline:
            print(f"\nMLflow stopped answering during the run; {self.journal.kept} results are kept "
                  f"in {self.journal.path}.\nWhen it is back, upload them with:\n  "
                  f"{self.journal.upload_command()}\nthen render the report with:\n  python -m "
                  f"orchestrator.report --run {self.parent} --tracking-uri {self.tracker.uri}",
                  file=sys.stderr)
            return 3
        outdir = report_dir(self.tracker, self.campaign.name, self.parent)
        analysis, md, upload_error = build_report(self.tracker, self.parent, dict(spec), outdir,
                                                  extra_md=extra_md)
        complete = all(s.complete for s in analysis.status.values())
        print("\n" + md)
        print(f"\nreport: {outdir}/report.md")
        if upload_error:
            self.tracker.client.set_tag(self.parent, "mmemb.report_error", upload_error[:500])
            self.tracker.end(self.parent, "FAILED")
            print(f"error: the report could not be stored in MLflow ({upload_error}); it is in "
                  f"{outdir}. Upload it again with: python -m orchestrator.report --run "
                  f"{self.parent} --tracking-uri {self.tracker.uri}", file=sys.stderr)
            return 1
        self.tracker.end(self.parent, "FINISHED" if complete else "FAILED")
        print(f"open the runs: mlflow ui --backend-store-uri {self.tracker.uri}  "
              "(then http://127.0.0.1:5000)")
        try:
            print_links(share(self.tracker, self.parent))
        except Exception as e:  # the links are a convenience; the table's result stands
            print(f"(could not save the table's MLflow view: {e})", file=sys.stderr)
        if not complete:
            print("some runs failed; run the same command with --resume to run only those",
                  file=sys.stderr)
            return 1
        return 0

    def interrupted(self) -> int:
        """Ctrl-C: the parent and its unfinished children end KILLED (--resume reopens them)."""
        for run in self.tracker.unfinished_runs(self.parent).values():
            if self.tracker.client.get_run(run).info.status == "RUNNING":
                self.tracker.end(run, "KILLED")
        self.tracker.end(self.parent, "KILLED")
        print(f"\ninterrupted: finished runs are kept in MLflow (parent {self.parent}); run the "
              "same command with --resume to continue from the last checkpoints", file=sys.stderr)
        return 130


def run_table(campaign: Campaign, opts: Options, array_keys: Mapping[str, str]) -> int:
    """A paper table: every member, then the report."""
    import json

    s = Session(campaign, opts, array_keys)
    if not s.resumed:
        s.tracker.log_artifact_text(s.parent, "grid.json", json.dumps(dict(campaign.spec), indent=1))
    done = s.tracker.finished_runs(s.parent)
    n_done = sum(1 for m in campaign.members if m.key in done)
    spec = campaign.spec
    print(f"{spec.get('title', campaign.name)}\n{len(campaign.members)} runs "
          f"({len(spec['cells'])} cells x {len(spec['seeds'])} seeds), {n_done} already done, "
          f"{len(campaign.members) - n_done} to run")
    print(f"MLflow parent run {s.parent} at {s.tracker.uri}", flush=True)
    out = s.run(campaign.members, f"{campaign.name}-{campaign.plan_id}")
    if out.interrupted:
        return s.interrupted()
    return s.finish(campaign.spec)


def dry_run_arrays(members: Sequence[RunPlan], array_keys: Mapping[str, str], name: str,
                   opts: Options) -> tuple[list[ArrayPlan], int]:
    """The arrays a campaign would run and how many at once, without starting anything (the
    resources were checked against this machine by ``preflight.check_campaign``)."""
    res = Resources(opts.cpus_per_trial, opts.gpus_per_trial or 0.0, opts.max_concurrent)
    slots = res.concurrency(local_resources()) if not opts.address else (opts.max_concurrent or 1)
    arrays = pack(members, array_keys, name, opts.storage, opts.cpus_per_trial, res.gpus_per_trial,
                  opts.max_failures, opts.array_size, slots)
    return arrays, slots


def describe(arrays: Sequence[ArrayPlan]) -> str:
    """The dry run's listing: every array, its members and what it asks for."""
    lines = []
    for t in arrays:
        res = f"{t.cpus:g} CPU" + (f" + {t.gpus:g} GPU" if t.gpus else "")
        lines.append(f"{t.label}  [{res} per worker, {t.members[0].run.num_workers} worker(s)]")
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
    from trainables.profiles import resolve_encoder

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
        if m.run.objective.method == "dalr" else (), m.run.final_eval) for m in a.members] for a in arrays]
    files = [*rates, *sorted(str(f) for f in RATES_DIR.glob("*.json"))] if RATES_DIR.is_dir() else list(rates)
    est = estimate(members, gpu, gpus_per_trial or 1.0, concurrent, mfu,
                   [read_measured(f) for f in files])
    return format_estimate(est, assumed_gpus=gpus_per_trial is None)


def explain(runs: Sequence[RunPlan]) -> str:
    """``--dry-run --explain``: per cell, every setting that differs from its field default, its
    value and the layer that set it (``trainables.profiles.explain_config``). A cell's runs differ
    only in their seed, so the seeds are listed once."""
    from trainables.config import flatten

    lines = ["where each setting comes from (settings at their field default are not listed):"]
    by_cell: dict[str, list[RunPlan]] = {}
    for r in runs:
        by_cell.setdefault(r.cell, []).append(r)
    for cell, rs in by_cell.items():
        first = rs[0]
        values = flatten(first.run.to_dict())
        lines.append(f"{cell} (seeds {' '.join(str(r.run.seed) for r in rs)}):")
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
