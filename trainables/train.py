"""An array of runs as one Ray Train job (the workers' side), and the one-run command line.

    python -m trainables.train --profile demo
    python -m trainables.train --config run.yaml objective.method=kdmcse lr=2e-5 seed=3

Ray 2.60 runs Train V2: a Tune trial must *launch* a TorchTrainer (``run_torch_trainer`` below,
called from the orchestrator's trial function); passing a Trainer to a Tuner is gone. Checkpoints
go through ``ray.train.report`` so Ray restores a failed worker group from the latest one.

Every report carries ``members``: one dict per member (its key and its metrics), which the driver
turns into one MLflow child run per member.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the configs' module imports torch: a Tune trial and Train's controller
    from trainables.config.run_config import RunConfig  # load this module and compute nothing

FINAL_KEY = "final"
"""metric set to 1 on the last report, which carries each member's seven test scores"""


def _stop_if_orphaned(owner: str | None) -> None:
    """End this Train run when the Tune trial that launched it is gone (stopped by a scheduler).

    A stopped trial's process dies, but Train V2 keeps its controller retrying (the run's owner
    is not watched without Ray's state API, absent in this install), so a zombie run would take
    CPUs/GPUs from the next trials. The GCS actor table answers without the dashboard; where this
    Ray version moved it, ``private_state_api`` warns once and the run keeps training.
    """
    if not owner:
        return
    import ray

    from trainables.runtime.ray_env import private_state_api, train_controller

    api = private_state_api()
    if api is None:
        return
    try:
        dead = api[1](owner) == "DEAD"
    except Exception:  # the GCS is briefly unreachable: look again at the next report
        return
    if dead:
        # Kill the controller, then free this run's placement group: it outlives its creator and
        # would hold the CPUs/GPUs for the rest of the session. Removing it also ends this worker.
        ray.kill(train_controller(), no_restart=True)
        pg = ray.util.get_current_placement_group()
        if pg is not None:
            ray.util.remove_placement_group(pg)
        raise SystemExit(f"the Tune trial {owner} that launched this run is gone; stopping")


def final_members(finals: dict[str, dict[str, Any]], failed: dict[str, str],
                  models: dict[str, str]) -> list[dict[str, Any]]:
    """The last report's ``members``: test scores and model folder, or the failure."""
    out = [{"key": k, **m, "model": models.get(k, "")} for k, m in finals.items()]
    return out + [{"key": k, "failed": 1, "error": why} for k, why in failed.items()]


class TrainSession:
    """What ``run_array`` asks of the process it runs in, in a Ray Train worker: the worker's
    rank, its device, Train's checkpoints and reports. (``trainables.runtime.in_trial`` is the
    same for an array trained inside its Tune trial.)"""

    def __init__(self, config: dict[str, Any]) -> None:
        import ray.train

        ctx = ray.train.get_context()
        self.rank, self.world = ctx.get_world_rank(), ctx.get_world_size()
        pg = ray.util.get_current_placement_group()
        self.placement_group = pg.id.hex() if pg is not None else ""  # the driver frees it
        self.owner = config.get("owner")
        queue = config.get("progress")
        self.progress = None
        if queue is not None and self.rank == 0:
            def progress(item: dict[str, Any]) -> None:
                with contextlib.suppress(Exception):  # the live view's convenience, never a failure
                    queue.put_nowait({**item, "progress": 1})

            self.progress = progress

    def device(self) -> Any:
        import ray.train.torch

        return ray.train.torch.get_device()

    def check_alive(self) -> None:
        _stop_if_orphaned(self.owner)

    @contextlib.contextmanager
    def checkpoint(self):
        """The run's latest checkpoint as a local folder while the block runs, or None."""
        import ray.train

        ckpt = ray.train.get_checkpoint()
        if ckpt is None:
            yield None
            return
        with ckpt.as_directory() as d:
            yield Path(d)

    def report(self, metrics: dict[str, Any], ckpt_dir: Path | None = None) -> None:
        """Report ``metrics``, with ``ckpt_dir`` (consumed: Ray copies it to storage) if any."""
        import ray.train

        if ckpt_dir is None:
            ray.train.report(metrics)
            return
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(str(ckpt_dir)))
        shutil.rmtree(ckpt_dir, ignore_errors=True)


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train worker entry: the array's loop in Train's session."""
    from trainables.runtime.ray_env import quiet_train_reports

    quiet_train_reports()
    _stop_if_orphaned(config.get("owner"))
    run_array(config, TrainSession(config))


def run_array(config: dict[str, Any], session: Any) -> None:
    """Build the array, resume from the session's checkpoint, run, report.

    ``session`` is a :class:`TrainSession` or an in-trial one (``trainables.runtime.in_trial``):
    ``rank``, ``world``, ``placement_group``, ``progress`` (rank 0's, or None), ``device()``,
    ``check_alive()``, ``checkpoint()`` and ``report(metrics, ckpt_dir)``.
    """
    import ray
    import torch

    from trainables.arrays.checkpoint import read_final, write_final
    from trainables.arrays.members import slug
    from trainables.arrays.trainer import ArrayTrainer
    from trainables.objectives.methods import ensure_methods

    # Ray sets threads from the (fractional) CPU request; use the whole CPUs the trial asked for.
    torch.set_num_threads(config.get("threads", 1))
    rank, world, pg_id = session.rank, session.world, session.placement_group
    ensure_methods(config.get("methods") or {})  # a plug-in method this process never imported
    with session.checkpoint() as d:
        done = read_final(d) if d is not None else None
        if done is not None:  # the array had finished: report it again, train nothing
            models = {k: f"members/{slug(k)}/model" for k in done["final"]}
            session.report({"step": done.get("step", 0), FINAL_KEY: 1, "placement_group": pg_id,
                            "members": final_members(done["final"], done["failed"], models)})
            return
        from trainables.config.run_config import RunConfig

        members = [(m["key"], RunConfig.from_dict(m["run"])) for m in config["members"]]
        trainer = ArrayTrainer(members, device=session.device(), rank=rank, world=world,
                               halving=config.get("halving"), groups=config.get("groups"))
        if d is not None:
            trainer.load_state(d)
            if rank == 0:
                session.report({**trainer.last_evaluation(), "placement_group": pg_id,
                                "total_steps": trainer.total_steps})
            else:
                session.report({"step": trainer.step, "members": []})
    workdir = Path(tempfile.mkdtemp(prefix="mmemb-ckpt-"))

    def report(metrics: dict[str, Any], ckpt_dir: Path | None) -> None:
        session.check_alive()
        metrics = {**metrics, "placement_group": pg_id, "total_steps": trainer.total_steps}
        if rank == 0:
            devs = [m["stsb_dev"] for m in metrics["members"] if "stsb_dev" in m]
            if devs:
                print(f"step {metrics['step']:>6d}/{trainer.total_steps}  {len(devs)} members  "
                      f"STS-B dev {min(devs):.2f}-{max(devs):.2f}", flush=True)
        session.report(metrics, ckpt_dir)

    try:
        finals = trainer.fit(report, workdir, session.progress)
    except BaseException:  # a failed array leaves no checkpoint folder in the temp dir
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    failed = trainer.failed
    metrics: dict[str, Any] = {"step": trainer.step, FINAL_KEY: 1, "placement_group": pg_id,
                               "total_steps": trainer.total_steps,
                               "node_id": ray.get_runtime_context().get_node_id()}
    if rank == 0:
        # Only the best weights outlive a finished array (plus the scores, so a resumed run
        # re-reports them): the optimiser state is of no use once every member is done.
        out = workdir / "final"
        out.mkdir()
        exported = trainer.export_best(out / "members") if finals else {}
        models = {k: str(p.relative_to(out)) for k, p in exported.items()}
        write_final(out, finals, failed, trainer.step)
        if config.get("keep_checkpoints"):
            trainer.save_state(out / "state")
        metrics["members"] = final_members(finals, failed, models)
        session.report(metrics, out)
    else:
        session.report({**metrics, "members": []})
    shutil.rmtree(workdir, ignore_errors=True)


def train_in_trial(config: dict[str, Any], storage: str, name: str, gpus: float,
                   reports: Any) -> None:
    """Run the array of ``config`` (``loop_config``) in this process, a Tune trial's
    (``trainables.runtime.in_trial``): its checkpoints under ``storage``/``name``, each report
    put on ``reports``."""
    import os

    from trainables.runtime.checkpoint_store import CheckpointStore
    from trainables.runtime.in_trial import TrialSession

    for k, v in QUIET_ENV.items():  # before transformers is imported, which reads them
        os.environ.setdefault(k, v)
    store = CheckpointStore(storage, name, bool(config.get("keep_checkpoints")))
    run_array(config, TrialSession(store, reports, gpus))


def run_torch_trainer(members: Sequence[tuple[str, RunConfig | Mapping[str, Any]]], name: str,
                      storage_path: str, callbacks: list | None = None, max_failures: int = 0,
                      cpus: float = 1.0, gpus: float = 1.0, owner: str | None = None,
                      keep_checkpoints: bool = False,
                      halving: tuple[Sequence[int], float] | None = None,
                      groups: dict[str, str] | None = None, progress: Any = None,
                      methods: Mapping[str, Any] | None = None):
    """Build and fit the Ray Train run of one array; returns Ray's Result (raises on failure).

    ``members`` are (key, RunConfig or its ``to_dict()``); a Tune trial passes dicts, with the
    plug-in ``methods``' sources resolved by the driver, so it never imports torch.
    ``cpus``/``gpus`` are per worker; a fractional ``gpus`` packs several arrays on one GPU
    (Ray's fractions are logical: size the arrays to fit the GPU's memory). ``owner`` is the
    calling Tune trial's actor id, so the run ends itself if the trial is stopped.
    ``halving`` = (rung steps, eta) prunes member ``groups`` (a search configuration's seeds)
    by successive halving inside the array. ``progress`` is a queue on which rank 0 puts
    the array's step every few seconds (``orchestrator.run.trial``: the live view's steps).
    """
    import ray.train

    from trainables.runtime.faults import forwarded_env

    runs = [(k, c if isinstance(c, Mapping) else c.to_dict()) for k, c in members]
    if methods is None:
        from trainables.objectives.methods import sources

        methods = sources({r["objective"]["method"] for _, r in runs})
    first = runs[0][1]
    use_gpu = uses_gpu(first, gpus)
    workers = int(first.get("num_workers", 1))
    trainer_class = trainer_for(workers)
    trainer = trainer_class(
        train_loop_per_worker,
        train_loop_config={**loop_config(runs, methods, cpus, keep_checkpoints, halving, groups),
                           "owner": owner, "progress": progress},
        scaling_config=ray.train.ScalingConfig(
            num_workers=workers, use_gpu=use_gpu,
            resources_per_worker={"CPU": cpus, **({"GPU": gpus} if use_gpu else {})},
        ),
        run_config=ray.train.RunConfig(
            name=name, storage_path=storage_path, callbacks=callbacks or [],
            failure_config=ray.train.FailureConfig(max_failures=max_failures),
            checkpoint_config=ray.train.CheckpointConfig(
                num_to_keep=None if keep_checkpoints else 1),
            # Keep Train's INFO echo of every report out of the terminal; prints stay plain.
            logging_config=ray.train.LoggingConfig(log_level="WARNING"),
            worker_runtime_env={"env_vars": {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0", **QUIET_ENV,
                                             **forwarded_env()}},
        ),
    )
    return trainer.fit()


QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
             "TOKENIZERS_PARALLELISM": "false"}
"""the environment an array trains in: plain progress lines, no tokenizer fork warnings"""


def loop_config(runs: Sequence[tuple[str, Mapping[str, Any]]], methods: Mapping[str, Any],
                cpus: float, keep_checkpoints: bool,
                halving: tuple[Sequence[int], float] | None,
                groups: dict[str, str] | None) -> dict[str, Any]:
    """``run_array``'s config: the members (key, RunConfig dict) and how to run them."""
    return {
        "members": [{"key": k, "run": r} for k, r in runs],
        # where the members' plug-in methods live: loaded before the configs
        "methods": dict(methods),
        "threads": max(1, round(cpus)), "keep_checkpoints": keep_checkpoints,
        "halving": halving, "groups": groups or {},
    }


def uses_gpu(run: Mapping[str, Any], gpus: float) -> bool:
    """Whether an array of these runs (a RunConfig's dict) trains on GPUs: ``use_gpu`` when
    set, else whether the cluster has one; never with ``gpus`` 0."""
    from trainables.runtime.ray_env import cluster_has_gpu

    wanted = bool(run["use_gpu"]) if run.get("use_gpu") is not None else cluster_has_gpu()
    return wanted and gpus > 0


def trainer_for(workers: int) -> Any:
    """Ray Train's trainer class for an array of ``workers`` workers.

    Several workers average their gradients through torch.distributed: ``TorchTrainer`` sets up
    its process group. One worker needs none, and ``TorchTrainer``'s backend would import torch
    in Train's controller (a process that only schedules): the plain data-parallel trainer with
    Ray's base backend runs the same loop with the same resources. Either comes without the
    helper actors Train starts for what the arrays do not use (``ray_env.lean_trainer``).
    """
    from trainables.runtime.ray_env import lean_trainer

    if workers > 1:
        from ray.train.torch import TorchTrainer

        return lean_trainer(TorchTrainer)
    from functools import partial

    from ray.train.backend import BackendConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    return partial(lean_trainer(DataParallelTrainer), backend_config=BackendConfig())


def parser() -> argparse.ArgumentParser:
    from trainables.runtime.checks import count
    from trainables.runtime.command_line import Parser, option

    p = Parser(prog="python -m trainables.train", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file of run settings (nested or dotted keys)")
    p.add_argument("--profile", help="demo | paper | FILE.yaml (data, encoder, teachers)")
    p.add_argument("--method", help="a registered method: simcse, mcse, kdmcse, dalr or one of "
                                    "--methods (shortcut for objective.method)")
    p.add_argument("--methods", nargs="+", default=[], metavar="FILE.py|MODULE",
                   help="load methods of your own first (docs/methods.md)")
    p.add_argument("--storage", default="runs/ray", help="Ray storage path for checkpoints")
    p.add_argument("--address", help="Ray address to join (default: embedded local Ray)")
    p.add_argument("--max-failures", type=option(count(0)), default=0,
                   help="worker-group restarts on failure")
    p.add_argument("overrides", nargs="*", help="key=value settings, e.g. lr=2e-5 seed=3")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from trainables.config.profiles import build_config
    from trainables.config.run_config import load_yaml, parse_cli_overrides
    from trainables.runtime.command_line import writable_folder
    from trainables.runtime.ray_env import init_ray, root_cause, storage_uri

    try:
        from trainables.objectives.methods import load_methods

        load_methods(args.methods)
        overrides = load_yaml(args.config) if args.config else {}
        overrides.update(parse_cli_overrides(args.overrides))
        cfg = build_config(args.profile, args.method, overrides)
        if "://" not in args.storage:
            writable_folder(args.storage, "--storage")
        if not args.address:
            _check_fits(cfg)
        from trainables.data.batches import check_batch_fits, check_dims, load_data
        from trainables.data.schedule import count_steps, run_length

        data = load_data(cfg)
        check_dims(cfg, data)  # bad data fails here, before Ray starts
        check_batch_fits(cfg, data)
        counts = count_steps(data.n_text, data.n_pair, cfg.batch_size, cfg.epochs,
                             cfg.schedule)  # and a schedule that cannot run (more caption
        # batches than text batches, officially)
        steps, _ = run_length(counts, cfg.max_steps)
        if cfg.eval_every > steps:
            print(f"note: eval_every={cfg.eval_every} but the run is {steps} steps, so no STS-B "
                  "dev evaluation falls inside it: the only one is at its last step, which is "
                  f"then its best checkpoint; set eval_every={max(1, steps // 2)} or lower to "
                  "choose among checkpoints", file=sys.stderr)
    except (ValueError, OSError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"run {cfg.config_hash()}: {cfg.objective.method} on {cfg.encoder}, seed {cfg.seed}")
    init_ray(args.address)
    storage = storage_uri(args.storage)
    key = f"run/seed-{cfg.seed}"
    from trainables.runtime.ray_env import cluster_has_gpu

    gpus = 1.0
    if cfg.use_gpu and not cluster_has_gpu():  # Ray would wait for a GPU that never comes
        print("note: use_gpu=true, but Ray sees no GPU here, so the run trains on the CPU; to "
              "use a GPU, run it where one is (--address of a GPU cluster)", file=sys.stderr)
        gpus = 0.0
    try:
        result = run_torch_trainer([(key, cfg)], f"run-{cfg.config_hash()}", storage,
                                   max_failures=args.max_failures, gpus=gpus)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # Train V2 raises the workers' error from fit()
        print(f"error: run failed: {root_cause(e)}", file=sys.stderr)
        return 1
    (m,) = (result.metrics or {}).get("members", [{}])
    if m.get("failed"):
        print(f"error: run failed: {m['error']}", file=sys.stderr)
        return 1
    print_final(m)
    if result.checkpoint is not None and m.get("model"):
        print(f"best model: {result.checkpoint.path}/{m['model']}")
    return 0


def _check_fits(cfg: RunConfig) -> None:
    """Without ``--address``, the run's workers must fit this machine (one CPU each)."""
    import os

    cpus = os.cpu_count() or 1
    if cfg.num_workers > cpus:
        raise ValueError(f"num_workers={cfg.num_workers} needs {cfg.num_workers} CPUs (one per "
                         f"Train worker) but this machine has {cpus}; lower num_workers")


def print_final(m: dict[str, Any]) -> None:
    from trainables.evaluation.sts import ALL_TASKS

    tasks = [*ALL_TASKS, "avg"]
    print("best STS-B dev {:.2f} at step {}".format(m.get("best_stsb_dev", float("nan")),
                                                    m.get("best_step")))
    print(" ".join(f"{t:>8s}" for t in tasks))
    print(" ".join(f"{m.get('test/' + t, float('nan')):8.2f}" for t in tasks))
    if "test/alignment" in m:
        print(f"alignment {m['test/alignment']:.3f}  uniformity {m['test/uniformity']:.3f}")


if __name__ == "__main__":
    from trainables.runtime.command_line import exit_now

    exit_now(main())  # no teardown of torch, Ray, MLflow: ~3 s
