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

import contextlib
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator.run.failures import DiskFull, MemoryShort, memory_short
from orchestrator.run.options import Options
from orchestrator.run.resources import local_resources, wait_for_resources
from orchestrator.run.resume import find_parent, say_lost_checkpoints
from orchestrator.spec.plan import ArrayPlan, RunPlan, pack
from orchestrator.tracking.uris import masked, masked_text


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
        from orchestrator.run.preflight import array_resources
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
        from orchestrator.tracking.events import ONE_BY_ONE, Console

        self.console = Console()
        """the members' events: one console line at most per kind for the whole campaign"""
        for method in self.one_by_one:  # said by the pre-start checks' warning already
            self.console.event(f"{ONE_BY_ONE}:{method}", "", say=False)
        if not opts.address:  # nothing can join the embedded Ray: refuse what cannot fit, now
            res, who = array_resources(opts, campaign.members)
            res.check_fits(local_resources(), "this machine", who)
        self.storage = storage_uri(opts.storage)
        from orchestrator.run.early_ray import EarlyRay

        self._early_ray = EarlyRay.beside(opts)  # while the MLflow store opens
        try:
            self._open(campaign, opts)
        except BaseException:
            if self._early_ray is not None:  # a refusal: no Ray left running behind its line
                self._early_ray.stop_unclaimed()
            raise

    def _open(self, campaign: Campaign, opts: Options) -> None:
        """Open the store, find the parent, take the driver lock, start Ray and the parent."""
        from orchestrator.run.driver import DriverLock, check_store, lock_paths
        from orchestrator.tracking.client import Tracker
        from orchestrator.tracking.uris import sqlite_path

        # --resume reads a store that must exist: a wrong folder gets no new empty mlflow.db
        try:
            self.tracker = Tracker(opts.tracking_uri, create=not opts.resume,
                                   artifact_location=opts.artifact_location)
        except ValueError as e:
            raise ValueError(f"--resume: nothing to resume: {e}" if opts.resume else str(e)) \
                from None
        db = sqlite_path(self.tracker.uri)
        what = (f"python -m {COMMANDS.get(campaign.kind, 'orchestrator')} for {campaign.kind} "
                f"{campaign.name!r} (plan {campaign.plan_id}) on {masked(self.tracker.uri)}")
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

    @property
    def one_by_one(self) -> dict[str, str]:
        """method -> why its members train one by one (the pre-start check's verdicts)."""
        return dict(self.campaign.spec.get("one_by_one") or {})

    def _find_parent(self, quiet: bool = False) -> str | None:
        """The parent this session continues (``resume.find_parent``), or None: a new one."""
        found = find_parent(self.tracker, self.campaign, self.opts.resume, quiet)
        if found is None:
            return None
        if found.extended:
            self.extended = True
        self._code_changed(found.run)
        return found.run_id

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
        from trainables.runtime import ray_address, shipping
        from trainables.runtime.ray_env import init_ray, sigterm_as_interrupt

        opts, c = self.opts, self.campaign
        ray_address.check(opts.address)  # nobody at the address: one line, before the parent run
        shipping.check()  # user code Ray would refuse to ship, or ship without a file it imports
        print(f"{c.parent_name}: starting Ray"
              + (f" on the cluster at {opts.address}" if opts.address else " on this machine"),
              flush=True)  # the first line of the live view comes once Tune runs
        # Ray's start is mostly a wait on its daemons: Tune's import (1.5 s, the live view's
        # callbacks) runs meanwhile instead of after it.
        tune_imported = import_aside("orchestrator.run.live")
        try:
            if self._early_ray is not None:
                self._early_ray.claim()  # started beside the store's opening, where it was
            init_ray(opts.address, log_to_driver=False)  # a no-op where it was
            sigterm_as_interrupt()  # here: the thread that started Ray could not install it
        except Exception as e:  # a cluster that is not there, a raylet that did not come up
            from trainables.runtime.ray_env import root_cause

            where = f"the Ray cluster at {opts.address}" if opts.address else "the embedded Ray"
            raise ConnectionError(f"{where} did not start ({root_cause(e)}); check `ray status` "
                                  "(with --address) or the machine's load and memory, then run "
                                  "the command again") from None
        finally:
            tune_imported.join()
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
        if self.one_by_one:  # methods whose members train one by one (preflight's warning)
            tags["mmemb.batched"] = "false"
            tags["mmemb.batched_reason"] = "; ".join(
                f"{m}: {why}" for m, why in self.one_by_one.items())[:5000]
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
            self.journal.write(op, handle, payload)
        else:
            call()

    # --- running ---------------------------------------------------------------------------
    def run(self, members: Sequence[RunPlan], experiment: str,
            halving: tuple[tuple[int, ...], float] | None = None) -> Outcome:
        """Train the members not yet finished under this parent, as arrays, in one Tune run."""
        from orchestrator.run.live import LiveView, Prior
        from orchestrator.tracking.mirror import MlflowMirror

        done = self.tracker.finished_runs(self.parent)
        todo = [m for m in members if m.key not in done]
        if not todo:
            return Outcome({}, {}, {})
        if not hasattr(self, "slots"):  # _start found nothing left to train
            self._start_ray()
        arrays = self._arrays(members, done, halving)
        mirror = MlflowMirror(arrays, self.journal, self.parent,
                              self.tracker.unfinished_runs(self.parent), self.one_by_one)
        self._mirrors.append(mirror)
        if self.live_prior is None:
            self.live_prior = Prior(time.monotonic())
        view = LiveView(arrays, later_runs=self.later_runs, prior=self.live_prior,
                        console=self.console)
        try:
            self._tune(arrays, experiment, [mirror, view])
        finally:
            self.live_prior.add(view)
        ended = set(mirror.finals) | set(mirror.failures) | set(mirror.pruned)
        return Outcome(mirror.finals, mirror.failures, mirror.pruned, mirror.best_dev,
                       interrupted=any(m.key not in ended for m in todo))

    def _arrays(self, members: Sequence[RunPlan], done: Mapping[str, str],
                halving: tuple[tuple[int, ...], float] | None) -> list[ArrayPlan]:
        """The arrays of the members not ``done``, said in one line (and a line per array that
        trains slower than it could, per lost checkpoint)."""
        opts = self.opts
        todo = [m for m in members if m.key not in done]
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
            say_lost_checkpoints(self.tracker, self.parent, self.storage,
                                 [t for t in arrays if t.name in whole])
        return arrays

    def _tune(self, arrays: Sequence[ArrayPlan], experiment: str, callbacks: list[Any]) -> None:
        """One Tune experiment, a trial per array; a full disk or Ray's out-of-memory kill
        raised as its one line (``failures.py``)."""
        from ray import tune

        from orchestrator.run.ending import report_imports_callback
        from orchestrator.run.interrupts import keep_sigint
        from orchestrator.run.launch import launch_of
        from orchestrator.run.placement import cleanup_callback
        from orchestrator.run.trial import trial_fn, trial_resources
        from orchestrator.spec.grids import path_part

        def dirname(trial) -> str:
            return f"{arrays[trial.config['index']].name}-{trial.trial_id[-5:]}"

        # A failed trial is one "FAILED ... : reason" line of the live view and a tag in MLflow;
        # Tune's own print of it (a traceback, an OOM report) stays in the trial's error.txt.
        os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
        # Tune's own loggers, less TensorBoard's: MLflow holds the curves, and tensorboardX's
        # import (boto3 with it: 1-2 s) sat between the parent run and the first trial. Its CSV
        # and JSON logs stay, where Tune users look (each trial's progress.csv, result.json).
        # The switch is set for this experiment's fit alone: another Tuner of the process keeps
        # Tune's defaults. A user's own setting of it is left to do what it says.
        auto = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"
        ours = auto not in os.environ
        loggers = [tune.logger.CSVLoggerCallback(), tune.logger.JsonLoggerCallback()] if ours else []
        launches = [launch_of(a) for a in arrays]
        tuner = tune.Tuner(
            tune.with_resources(tune.with_parameters(trial_fn, arrays=launches),
                                lambda config: trial_resources(launches[config["index"]])),
            param_space={"index": tune.grid_search(list(range(len(arrays))))},
            tune_config=tune.TuneConfig(max_concurrent_trials=self.slots,
                                        trial_dirname_creator=dirname),
            run_config=tune.RunConfig(
                name=path_part(experiment), storage_path=self.storage, verbose=0,
                callbacks=[*callbacks, *loggers, cleanup_callback(), report_imports_callback()],
                failure_config=tune.FailureConfig(max_failures=self.opts.max_failures),
            ),
        )
        restore_sigint = keep_sigint()  # Tune's handler would swallow a later Ctrl-C
        if ours:
            os.environ[auto] = "1"
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
            if ours:
                os.environ.pop(auto, None)

    # --- the end ---------------------------------------------------------------------------
    def disk_full(self, texts: Sequence[str] = ()) -> str | None:
        """The one line for a full disk, when a failure of this session says the disk is full."""
        from orchestrator.run.disk import disk_full_line, full_folders, says_disk_full
        from orchestrator.tracking.uris import sqlite_path

        said = [*texts, *(self.journal.failures if self.journal else []),
                *(why for m in self._mirrors for why in m.failures.values())]
        if not any(says_disk_full(t) for t in said):
            return None
        db = sqlite_path(self.tracker.uri)
        places = [p for p in (self.storage if "://" not in self.storage else None,
                              db.parent if db else None,
                              self.journal.moved_from.parent if self.journal and
                              self.journal.moved_from else None) if p]
        upload = masked_text(self.journal.upload_command()) if self.journal and self.journal.kept else ""
        return disk_full_line(full_folders(places), self.resume_command(), upload)

    def resume_command(self) -> str:
        """This command with --resume, as the user typed it (when it ran as ``python -m``)."""
        import shlex

        module = COMMANDS.get(self.campaign.kind, "")
        argv = sys.argv[1:] if sys.argv and sys.argv[0].endswith(
            module.replace(".", "/") + ".py") else None
        if argv is None:
            return "the same command with --resume"
        from orchestrator.tracking.uris import masked_args

        return " ".join(["python", "-m", module, *map(shlex.quote, masked_args(argv)),
                         *([] if "--resume" in argv else ["--resume"])])

    def finish(self, spec: Mapping[str, Any], extra_md: str = "", lead_md: str = "") -> int:
        """:meth:`_finish`, with Ctrl-C or SIGTERM meanwhile held until the report is written
        (then exit 130)."""
        from orchestrator.run.interrupts import Deferred

        with Deferred("the report") as held:
            rc = self._finish(spec, extra_md, lead_md)
        return held.exit_code(rc)

    def _finish(self, spec: Mapping[str, Any], extra_md: str = "", lead_md: str = "") -> int:
        """Write the report (or say why not), end the parent, print where everything is
        (``orchestrator.run.ending``). ``lead_md``: the report's first line (a search's verdict)."""
        from orchestrator.run.ending import write_report

        return write_report(self, spec, extra_md, lead_md)

    def interrupted(self) -> int:
        """Ctrl-C or SIGTERM: the parent and its unfinished children end KILLED (--resume
        reopens them)."""
        self._end_all("KILLED", "interrupted (Ctrl-C or SIGTERM); --resume continues it")
        print(f"\ninterrupted: finished runs are kept in MLflow (parent {self.parent}); run the "
              "same command with --resume to continue from the last checkpoints", file=sys.stderr)
        return 130


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
        print(f"MLflow parent run {s.parent} at {masked(s.tracker.uri)}", flush=True)
        out = s.run(campaign.members, f"{campaign.name}-{campaign.plan_id}")
        if out.interrupted:
            return s.interrupted()
        return s.finish(campaign.spec)


def noted(arrays: Sequence[ArrayPlan]) -> list[ArrayPlan]:
    """Each array with the note of an encoder that trains through the looped fallback (read
    from its config; the pre-start check has already found every encoder)."""
    from trainables.arrays.looped import backend_note

    out = []
    for t in arrays:
        run = t.members[0].run
        out.append(replace(t, note=backend_note(run.encoder, run.data.cache_dir) or ""))
    return out


def import_aside(module: str) -> threading.Thread:
    """Import ``module`` in a helper thread (join it before relying on it). A failure there is
    left for the import in the main thread to raise, where it names the module."""
    import importlib

    def target() -> None:
        with contextlib.suppress(BaseException):
            importlib.import_module(module)

    thread = threading.Thread(target=target, name=f"import-{module}", daemon=True)
    thread.start()
    return thread
