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

import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator.run.options import Options
from orchestrator.run.resources import (
    TRIAL_DRIVER_RESOURCES,
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
    """the report's spec (``orchestrator.results.table_report.grid_spec``), stored on the parent as grid.json"""
    tags: Mapping[str, str] = field(default_factory=dict)
    summary: Mapping[str, Any] = field(default_factory=dict)
    """what the plan is made of (``orchestrator.spec.plan.plan_summary``): stored on the parent,
    compared by a later ``--resume`` whose plan differs"""


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
    """Use as a context manager: however the campaign ends (done, Ctrl-C or SIGTERM, a full
    disk, an error), no run of it is left RUNNING and its driver lock is released."""

    def __init__(self, campaign: Campaign, opts: Options, array_keys: Mapping[str, str]):
        from orchestrator.run.driver import DriverLock, check_store, lock_paths
        from orchestrator.run.preflight import array_resources
        from orchestrator.tracking.client import Tracker, sqlite_path
        from trainables.runtime.ray_env import storage_uri

        self.campaign, self.opts, self.array_keys = campaign, opts, dict(array_keys)
        self.parent: str | None = None
        self.code_change = ""
        """'<then> -> <now>' when --resume continues a parent trained by other code"""
        self.resumed = False
        self.extended = False
        """--resume found a parent of a subset of this plan (--cells, fewer seeds) and extends it"""
        self.journal: Any = None
        self.heartbeat: Any = None
        self._mirrors: list[Any] = []
        self._closed = False
        self.lock: Any = None
        self.later_runs = 0
        """runs a search will train after the next ``run`` (its live view's ETA counts them)"""
        self.live_prior: Any = None
        """what this session's earlier ``run``s did (``orchestrator.run.live.Prior``)"""
        if not opts.address:  # nothing can join the embedded Ray: refuse what cannot fit, now
            res, who = array_resources(opts, campaign.members)
            res.check_fits(local_resources(), "this machine", who)
        self.storage = storage_uri(opts.storage)
        # --resume reads a store that must exist: a wrong folder gets no new empty mlflow.db
        try:
            self.tracker = Tracker(opts.tracking_uri, create=not opts.resume)
        except ValueError as e:
            raise ValueError(f"--resume: nothing to resume: {e}" if opts.resume else str(e)) \
                from None
        db = sqlite_path(self.tracker.uri)
        what = (f"python -m {COMMANDS.get(campaign.kind, 'orchestrator')} for {campaign.kind} "
                f"{campaign.name!r} (plan {campaign.plan_id}) on {self.tracker.uri}")
        if not opts.queue:  # a refusal before anything is locked or created (a queued
            self._find_parent()  # command looks once the driver it waits for has ended)
        self.lock = DriverLock(lock_paths(campaign.plan_id, db, opts.storage), what, opts.queue)
        try:
            if db is None:  # a server shared by machines that may share no folder
                check_store(self.tracker, campaign.plan_id, what, opts.queue)
            reopen = self._find_parent(quiet=True)  # again: a queued driver finds the first's
            self._start(reopen, db is None)
        except BaseException as e:
            self.close(e)
            raise

    def _find_parent(self, quiet: bool = False) -> str | None:
        """With --resume: the parent of this plan, or one line saying what the store holds
        instead (nothing of this grid, or a plan that differs, and how). Without: None, with a
        note when an unfinished parent of the same plan could have been resumed."""
        from orchestrator.spec.plan import plan_difference, plan_union

        c = self.campaign
        found = self.tracker.find_parent(c.plan_id)
        if not self.opts.resume:
            # A plain rerun trains anew under a new parent (the parent names the Train runs):
            # it never reports another table's results; --resume is the way to reuse them.
            if found is not None and not quiet:
                unfinished = found.info.status != "FINISHED"
                print(f"note: {'an unfinished' if unfinished else 'a finished'} {c.kind} of "
                      f"this plan is in the store (parent {found.info.run_id}, "
                      f"{found.info.status}); this trains every run anew under a new parent, "
                      f"--resume would {'continue' if unfinished else 'reuse'} it",
                      file=sys.stderr, flush=True)
            return None
        if found is not None:
            self._code_changed(found)
            return found.info.run_id
        grid = c.tags.get("mmemb.grid")
        subset = grid and self.tracker.parent_to_extend(
            c.kind, grid, c.plan_id, {m.key: m.config_hash for m in c.members})
        if subset:
            self.extended = True
            self._code_changed(self.tracker.client.get_run(subset))
            return subset
        tag = "mmemb.space" if c.kind == "search" else "mmemb.grid"
        latest = self.tracker.latest_parent(c.kind, tag, c.tags.get(tag, c.name))
        if latest is None:
            raise ValueError(f"--resume: nothing to resume: {self.tracker.uri} holds no {c.kind} "
                             f"of {c.name!r}; run without --resume to start it, or pass the "
                             "--tracking-uri the interrupted run used")
        what, fix = plan_difference(self.tracker.parent_summary(latest), c.summary)
        rid = latest.info.run_id
        done = len(self.tracker.finished_runs(rid))
        how = "; ".join(what) or "its plan id differs"
        again = (f"run with {' '.join(fix)} to resume it" if fix else
                 "run the command it ran to resume it")
        union = plan_union(self.tracker.parent_summary(latest), c.summary)
        if union and union != fix:
            again += f", with {' '.join(union)} to extend it with this command's runs"
        raise ValueError(f"--resume: no {c.kind} of this plan in {self.tracker.uri}; the latest "
                         f"of {c.name!r} (parent {rid}, {latest.info.status}, {done} runs "
                         f"finished) has another plan: {how}. Nothing is retrained: {again}, or "
                         "drop --resume to start this plan anew")

    def _code_changed(self, parent: Any) -> None:
        """--resume across a code change says so: the runs it keeps came from other code."""
        from orchestrator.tracking.provenance import code_version

        then, now = parent.data.tags.get("mmemb.code_version"), code_version()
        change = f"{then} -> {now}" if then and then != now else ""
        said, self.code_change = self.code_change, change
        if change and change != said:  # once, though the parent is looked up twice
            print(f"note: --resume across a code change: the {self.campaign.kind}'s finished runs "
                  f"were trained by code {then}, this is {now}; they are kept as they are (start "
                  "without --resume to train every run with this code)", file=sys.stderr,
                  flush=True)

    def _start(self, reopen: str | None, heartbeat: bool) -> None:
        if not self.tracker.all_finished(reopen, [m.key for m in self.campaign.members]):
            self._start_ray()  # a --resume with nothing left to train starts no Ray
        self._open_parent(reopen, heartbeat)

    def _start_ray(self) -> None:
        import ray

        from orchestrator.run.preflight import array_resources
        from orchestrator.run.resources import cluster_nodes
        from trainables.runtime.ray_env import init_ray

        opts, c = self.opts, self.campaign
        print(f"{c.parent_name}: starting Ray"
              + (f" on the cluster at {opts.address}" if opts.address else " on this machine"),
              flush=True)  # the first line of the live view comes once Tune runs
        try:
            init_ray(opts.address, log_to_driver=False)
        except Exception as e:  # a cluster that is not there, a raylet that did not come up
            from trainables.runtime.ray_env import root_cause

            where = f"the Ray cluster at {opts.address}" if opts.address else "the embedded Ray"
            raise ConnectionError(f"{where} did not start ({root_cause(e)}); check `ray status` "
                                  "(with --address) or the machine's load and memory, then run "
                                  "the command again") from None
        gpus = opts.gpus_per_trial
        if gpus is None:
            gpus = 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0
        self.resources, who = array_resources(opts, c.members, gpus)
        if opts.address:
            wait_for_resources(self.resources, opts.wait_for_workers)
        else:
            self.resources.check_fits(cluster_nodes(), "the local Ray", who)
        self.autoscaling = bool(opts.address)
        self.slots = self.resources.concurrency(cluster_nodes(), self.autoscaling)

    def _open_parent(self, reopen: str | None, heartbeat: bool) -> None:
        import json

        from orchestrator.run.driver import DRIVER_TAG, Heartbeat, identity
        from orchestrator.tracking.journal import Journal

        c = self.campaign
        tags = {**c.tags, DRIVER_TAG: json.dumps(identity())}
        if reopen is not None and self.code_change:  # the first version stays the parent's
            tags["mmemb.code_resumed"] = self.code_change
        if self.extended:  # the subset's parent becomes this plan's: its runs are reused
            print(f"--resume: extending parent run {reopen}, which ran a subset of these runs "
                  "(its finished runs are reused)", flush=True)
            tags["mmemb.plan_id"] = c.plan_id
            self.tracker.client.log_text(reopen, json.dumps(c.summary, indent=1), "plan.json")
        self.parent = self.tracker.start_parent(c.parent_name, c.kind, c.plan_id, tags,
                                                reopen=reopen, summary=c.summary)
        self.resumed = reopen is not None
        from trainables.runtime import created

        created.keep()  # the run goes ahead: the caches its preflight built are its own
        if heartbeat:
            self.heartbeat = Heartbeat(self.tracker, self.parent)
        local = Path(self.storage if "://" not in self.storage else "runs").resolve()
        self.journal = Journal(self.tracker, local / f"mlflow-journal-{c.plan_id}.jsonl",
                               parent=self.parent)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close(exc)
        return False

    def close(self, error: BaseException | None = None) -> None:
        """End what is still RUNNING (KILLED after an interrupt, FAILED after an error, with the
        reason), stop the heartbeat, release the driver lock."""
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if error is not None and self.parent is not None and not self._closed:
            from trainables.runtime.command_line import one_line

            if isinstance(error, KeyboardInterrupt | SystemExit):
                self._end_all("KILLED", "interrupted (Ctrl-C or SIGTERM); --resume continues it")
            elif isinstance(error, DiskFull):
                self._end_all("FAILED", "the disk filled up; --resume continues the table")
            elif isinstance(error, MemoryShort):
                self._end_all("FAILED", "the machine ran out of memory; --resume continues it")
            else:
                self._end_all("FAILED", f"the driver stopped: {one_line(error)}"[:500])
        self._closed = True
        if self.lock is not None:
            self.lock.release()

    def _end_all(self, status: str, reason: str) -> None:
        """Every child still RUNNING, then the parent, end ``status`` with ``reason`` (through
        the journal: a store that stopped answering gets them when it is synced)."""
        from orchestrator.tracking.client import TAG

        j = self.journal
        running: list[str] = []
        if j is not None and not j.offline:
            try:
                running = [r.info.run_id for r in self.tracker.children(self.parent)
                           if r.info.status == "RUNNING"]
            except Exception:  # the store is gone: the mirrors know what they started
                running = []
        for m in self._mirrors:
            running += [h for k, h in m.runs.items() if k not in m.ended and h not in running]
        for run in running:
            self._write(lambda r=run: self.tracker.client.set_tag(r, f"{TAG}error", reason),
                        "set_tag", run, {"key": f"{TAG}error", "value": reason})
            self._write(lambda r=run: self.tracker.end(r, status), "end", run, {"status": status})
        self._write(lambda: self.tracker.client.set_tag(self.parent, f"{TAG}error", reason),
                    "set_tag", self.parent, {"key": f"{TAG}error", "value": reason})
        self._write(lambda: self.tracker.end(self.parent, status), "end", self.parent,
                    {"status": status})
        self._closed = True

    def _write(self, call, op: str, handle: str, payload: dict) -> None:
        if self.journal is not None:
            self.journal._write(handle, op, call, payload)
        else:
            call()

    # --- running ---------------------------------------------------------------------------
    def run(self, members: Sequence[RunPlan], experiment: str,
            halving: tuple[tuple[int, ...], float] | None = None) -> Outcome:
        """Train the members not yet finished under this parent, as arrays, in one Tune run."""
        from ray import tune

        from orchestrator.run.interrupts import keep_sigint
        from orchestrator.run.live import LiveView, Prior
        from orchestrator.run.placement import cleanup_callback
        from orchestrator.run.trial import trial_fn
        from orchestrator.spec.grids import path_part
        from orchestrator.tracking.mirror import MlflowMirror

        done = self.tracker.finished_runs(self.parent)
        todo = [m for m in members if m.key not in done]
        if not todo:
            return Outcome({}, {}, {})
        if not hasattr(self, "slots"):  # _start found nothing left to train
            self._start_ray()
        opts = self.opts
        new = [m for m in members if m.key not in self.array_keys]
        if new:  # members planned after the session opened (a search's rounds)
            from orchestrator.run.preflight import check_data

            self.array_keys.update(check_data(new).array_keys)
        # Packed over *all* members, then thinned: a resumed array keeps its name (and so its
        # Train checkpoint) whenever none of its members finished.
        # The parent names the Train runs: a plain rerun (a new parent) trains anew instead of
        # restoring the finished checkpoints of another table of the same plan on this storage.
        packed = [replace(p, parent=self.parent) for p in pack(
            members, self.array_keys, self.campaign.name, self.storage, opts.cpus_per_trial,
            self.resources.gpus_per_trial, opts.max_failures, opts.array_size, self.slots,
            opts.keep_checkpoints, halving)]
        arrays = noted([t for t in (p.without(done) for p in packed) if t is not None])
        sizes = sorted({len(t.members) for t in arrays})
        print(f"{len(todo)} runs in {len(arrays)} array{'s' * (len(arrays) != 1)} of "
              f"{'-'.join(map(str, sizes))} member{'s' * (sizes[-1] != 1)}, up to "
              f"{min(self.slots, len(arrays))} at once", flush=True)
        for t in arrays:
            if t.note:
                print(f"  {t.label}: {t.note}", flush=True)
        if self.resumed:  # arrays none of whose members finished continue their checkpoints
            whole = {p.name for p in packed if p.without(done) is p}
            self._say_lost_checkpoints([t for t in arrays if t.name in whole])
        mirror = MlflowMirror(arrays, self.journal, self.parent,
                              self.tracker.unfinished_runs(self.parent))
        self._mirrors.append(mirror)

        def dirname(trial) -> str:
            return f"{arrays[trial.config['index']].name}-{trial.trial_id[-5:]}"

        if self.live_prior is None:
            self.live_prior = Prior(time.monotonic())
        view = LiveView(arrays, later_runs=self.later_runs, prior=self.live_prior)

        # A failed trial is one "FAILED ... : reason" line of the live view and a tag in MLflow;
        # Tune's own print of it (a traceback, an OOM report) stays in the trial's error.txt.
        os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
        tuner = tune.Tuner(
            tune.with_resources(tune.with_parameters(trial_fn, arrays=arrays),
                                TRIAL_DRIVER_RESOURCES),
            param_space={"index": tune.grid_search(list(range(len(arrays))))},
            tune_config=tune.TuneConfig(max_concurrent_trials=self.slots,
                                        trial_dirname_creator=dirname),
            run_config=tune.RunConfig(
                name=path_part(experiment), storage_path=self.storage, verbose=0,
                callbacks=[mirror, view, cleanup_callback()],
                failure_config=tune.FailureConfig(max_failures=opts.max_failures),
            ),
        )
        restore_sigint = keep_sigint()  # Tune's handler would swallow a later Ctrl-C
        try:
            tuner.fit()
        except Exception as e:
            line = self.disk_full([str(e)])
            if line is None:
                short = memory_short(str(e))
                if short is None:
                    raise
                raise MemoryShort(f"{short}; the unfinished runs end FAILED (none is left "
                                  "RUNNING). Free memory (other programs on this machine), or "
                                  "run fewer or smaller arrays (--max-concurrent 1, --array-size), "
                                  f"then continue with: {self.resume_command()}") from None
            raise DiskFull(line) from None
        finally:
            restore_sigint()
            self.live_prior.add(view)
        ended = set(mirror.finals) | set(mirror.failures) | set(mirror.pruned)
        return Outcome(mirror.finals, mirror.failures, mirror.pruned, mirror.best_dev,
                       interrupted=any(m.key not in ended for m in todo))

    def _say_lost_checkpoints(self, arrays: Sequence[ArrayPlan]) -> None:
        """--resume of an array whose runs had trained (they logged a dev score, so a checkpoint
        was written) but whose checkpoints are gone from a local --storage: it starts again from
        step 0, and says so instead of retraining silently."""
        if "://" in self.storage:
            return
        results = self.tracker.member_results(self.parent)
        for t in arrays:
            started = [m.key for m in t.members
                       if "stsb_dev" in (results.get(m.key) or {}).get("metrics", {})]
            if started and not any((Path(self.storage) / t.name).glob("checkpoint_*")):
                print(f"note: --resume: the checkpoints of {t.label} are gone from "
                      f"{Path(self.storage) / t.name} (deleted, or another --storage); its "
                      f"{len(started)} started run(s) train again from step 0", file=sys.stderr,
                      flush=True)

    # --- the end ---------------------------------------------------------------------------
    def disk_full(self, texts: Sequence[str] = ()) -> str | None:
        """The one line for a full disk, when a failure of this session says the disk is full."""
        from orchestrator.run.disk import disk_full_line, full_folders, says_disk_full
        from orchestrator.tracking.client import sqlite_path

        said = [*texts, *(self.journal.failures if self.journal else []),
                *(why for m in self._mirrors for why in m.failures.values())]
        if not any(says_disk_full(t) for t in said):
            return None
        db = sqlite_path(self.tracker.uri)
        places = [p for p in (self.storage if "://" not in self.storage else None,
                              db.parent if db else None,
                              self.journal.moved_from.parent if self.journal and
                              self.journal.moved_from else None) if p]
        upload = self.journal.upload_command() if self.journal and self.journal.kept else ""
        return disk_full_line(full_folders(places), self.resume_command(), upload)

    def resume_command(self) -> str:
        """This command with --resume, as the user typed it (when it ran as ``python -m``)."""
        import shlex

        module = COMMANDS.get(self.campaign.kind, "")
        argv = sys.argv[1:] if sys.argv and sys.argv[0].endswith(
            module.replace(".", "/") + ".py") else None
        if argv is None:
            return "the same command with --resume"
        return " ".join(["python", "-m", module, *map(shlex.quote, argv),
                         *([] if "--resume" in argv else ["--resume"])])

    def finish(self, spec: Mapping[str, Any], extra_md: str = "", lead_md: str = "") -> int:
        """:meth:`_finish`, with Ctrl-C or SIGTERM meanwhile held until the report is written
        (then exit 130)."""
        from orchestrator.run.interrupts import Deferred

        with Deferred("the report") as held:
            rc = self._finish(spec, extra_md, lead_md)
        return held.exit_code(rc)

    def _finish(self, spec: Mapping[str, Any], extra_md: str = "", lead_md: str = "") -> int:
        """Write the report (or say why not), end the parent, print where everything is.
        ``lead_md``: the report's first line (a search's verdict)."""
        from orchestrator.results.table_report import build_report, report_dir
        from orchestrator.results.views import print_links, share

        full = self.disk_full()
        if full is not None:
            self._end_all("FAILED", "the disk filled up; --resume continues the table")
            print(f"error: {full}", file=sys.stderr)
            return 3 if self.journal.kept else 1
        if self.journal.offline:
            self._end_all("FAILED", f"MLflow stopped answering; results kept in "
                                    f"{self.journal.path}, uploaded by orchestrator.sync")
            print(f"\nMLflow stopped answering during the run; {self.journal.kept} results are "
                  f"kept in {self.journal.path}.\nWhen it is back, upload them with:\n  "
                  f"{self.journal.upload_command()}\nthen render the report with:\n  python -m "
                  f"orchestrator.report --run {self.parent} --tracking-uri {self.tracker.uri}",
                  file=sys.stderr)
            return 3
        outdir = report_dir(self.tracker, self.campaign.name, self.parent)
        try:
            analysis, md, upload_error = build_report(self.tracker, self.parent, dict(spec),
                                                      outdir, extra_md=extra_md,
                                                      lead_md=lead_md)
        except Exception as e:  # the runs are in MLflow: never leave their parent RUNNING
            why = f"{type(e).__name__}: {e}"
            self.tracker.client.set_tag(self.parent, "mmemb.report_error", why[:500])
            self.tracker.end(self.parent, "FAILED")
            print(f"error: the runs finished but the report could not be built ({why}); the "
                  f"parent run {self.parent} ends FAILED. Rebuild the report with: python -m "
                  f"orchestrator.report --run {self.parent} --tracking-uri {self.tracker.uri}",
                  file=sys.stderr)
            return 1
        complete = all(s.complete for s in analysis.status.values())
        print("\n" + md)
        print(f"\nreport: {outdir}/report.md")
        if self.journal.refused_files:  # the store answered but kept no files: not "offline"
            print(f"error: MLflow's artifact folder refused files ({self.journal.refused_files[0][:200]}); "
                  f"the scores are in MLflow, and {self.journal.kept} file upload(s) (the students' "
                  f"models) wait in {self.journal.path}: make the folder writable, then run "
                  f"{self.journal.upload_command()}", file=sys.stderr)
        if upload_error:
            self.tracker.client.set_tag(self.parent, "mmemb.report_error", upload_error[:500])
            self.tracker.end(self.parent, "FAILED")
            self._closed = True
            print(f"error: the report could not be stored in MLflow ({upload_error}); it is in "
                  f"{outdir}. Upload it again with: python -m orchestrator.report --run "
                  f"{self.parent} --tracking-uri {self.tracker.uri}", file=sys.stderr)
            return 1
        self.tracker.end(self.parent, "FINISHED" if complete and not self.journal.refused_files
                         else "FAILED")
        self._closed = True
        print(open_hint(self.tracker.uri))
        try:
            print_links(share(self.tracker, self.parent))
        except Exception as e:  # the links are a convenience; the table's result stands
            print(f"(could not save the table's MLflow view: {e})", file=sys.stderr)
        if self.journal.refused_files:
            return 1
        if not complete:
            print(closing_advice([why for m in self._mirrors for why in m.failures.values()]),
                  file=sys.stderr)
            return 1
        return 0

    def interrupted(self) -> int:
        """Ctrl-C or SIGTERM: the parent and its unfinished children end KILLED (--resume
        reopens them)."""
        self._end_all("KILLED", "interrupted (Ctrl-C or SIGTERM); --resume continues it")
        print(f"\ninterrupted: finished runs are kept in MLflow (parent {self.parent}); run the "
              "same command with --resume to continue from the last checkpoints", file=sys.stderr)
        return 130


def open_hint(uri: str) -> str:
    """How to open the runs: a local store through ``mlflow ui``; a tracking server (a cluster's
    head) is already the UI, reached from a laptop through an SSH tunnel."""
    if uri.startswith(("http://", "https://")):
        local = "127.0.0.1" in uri or "localhost" in uri
        return (f"open the runs: {uri} in a browser" + (
            " (from your laptop: ray attach cluster.yaml -p 5000, or ssh -L 5000:127.0.0.1:5000 "
            "to the head, then http://127.0.0.1:5000)" if local else ""))
    return f"open the runs: mlflow ui --backend-store-uri {uri}  (then http://127.0.0.1:5000)"


DETERMINISTIC = ("could not be set up", "failed at step", "non-finite loss",
                 "threshold filter masked every negative")
"""reasons a run fails the same way every time (its settings, its method's code, its seed): a
``--resume`` alone would repeat them (``trainables.arrays.trainer``)"""


def closing_advice(reasons: Sequence[str]) -> str:
    """What to do about the failed runs: fix a deterministic failure (the report's 'Failed runs'
    names each), resume after anything else (a worker, a node or the driver that died)."""
    fixed = [r for r in reasons if any(d in r for d in DETERMINISTIC)]
    if reasons and len(fixed) == len(reasons):
        return (f"{len(fixed)} run(s) failed for a reason in their settings or method (see "
                "'Failed runs' above): --resume alone would fail them the same way; fix the "
                "setting or the method first, then run the same command with --resume to train "
                "only those")
    if fixed:
        return (f"some runs failed: {len(fixed)} for a reason in their settings or method (fix "
                "those first, see 'Failed runs' above), the others for reasons a rerun can get "
                "past; run the same command with --resume to run only the failed ones")
    return "some runs failed; run the same command with --resume to run only those"


class DiskFull(OSError):
    """The disk filled up under a campaign; the message is the one line to print."""


class MemoryShort(OSError):
    """Ray's memory monitor killed the campaign's actors (the machine ran low on memory); the
    message is the one line to print, not Ray's page-long report of the workers it killed."""


def memory_short(text: str) -> str | None:
    """The one-line cause when ``text`` (an error out of Tune) is Ray's out-of-memory kill."""
    import re

    if "running low on memory" not in text and "OutOfMemoryError" not in text:
        return None
    killed = re.search(r"(\d+) worker\(s\) were killed", text)
    used = re.search(r"was ([\d.]+GB) used / ([\d.]+GB) limit", text)
    return ("this machine ran out of memory: Ray killed "
            + (f"{killed.group(1)} worker(s)" if killed else "the run's workers")
            + (f" ({used.group(1)} used of {used.group(2)})" if used else ""))


COMMANDS = {"table": "orchestrator.ablate", "search": "orchestrator.search",
            "calibration": "orchestrator.calibrate"}


def run_table(campaign: Campaign, opts: Options, array_keys: Mapping[str, str]) -> int:
    """A paper table: every member, then the report."""
    import json

    with Session(campaign, opts, array_keys) as s:
        if not s.resumed or s.extended:  # an extended parent's table grows: its spec is this one
            s.tracker.log_artifact_text(s.parent, "grid.json",
                                        json.dumps(dict(campaign.spec), indent=1))
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
    from orchestrator.run.preflight import array_resources

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
    from types import SimpleNamespace

    from orchestrator.tracking.client import Tracker

    try:
        tracker = Tracker(opts.tracking_uri, create=False)
    except ValueError as e:
        raise ValueError(f"--resume: nothing to resume: {e}") from None
    probe = SimpleNamespace(campaign=campaign, tracker=tracker, opts=opts, extended=False,
                            _code_changed=lambda parent: None)
    parent = Session._find_parent(probe, quiet=True)  # the same lookup as the real resume
    keys = {m.key for m in campaign.members}
    done = {k: v for k, v in tracker.finished_runs(parent).items() if k in keys}
    how = "extend" if probe.extended else "continue"
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

    try:
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


def noted(arrays: Sequence[ArrayPlan]) -> list[ArrayPlan]:
    """Each array with the note of an encoder that trains through the looped fallback (read
    from its config; the pre-start check has already found every encoder)."""
    from trainables.arrays.looped import backend_note

    out = []
    for t in arrays:
        run = t.members[0].run
        out.append(replace(t, note=backend_note(run.encoder, run.data.cache_dir) or ""))
    return out


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
