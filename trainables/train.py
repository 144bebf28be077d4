"""One training run as a Ray Train job, and its command line.

    python -m trainables.train --profile demo
    python -m trainables.train --config run.yaml objective.method=kdmcse lr=2e-5 seed=3

Ray 2.60 runs Train V2: a Tune trial must *launch* a TorchTrainer (``run_torch_trainer`` below,
called from the orchestrator's trial function); passing a Trainer to a Tuner is gone. Checkpoints
go through ``ray.train.report`` so Ray restores a failed worker group from the latest one.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainables.config import RunConfig, load_yaml, parse_cli_overrides

FINAL_KEY = "final"
"""metric set to 1 on the last report, which carries the seven test scores"""


def _stop_if_orphaned(owner: str | None) -> None:
    """End this Train run when the Tune trial that launched it is gone (stopped by ASHA).

    A stopped trial's process dies, but Train V2 keeps its controller retrying (the run's owner
    is not watched without Ray's state API, absent in this install), so a zombie run would take
    CPUs/GPUs from the next trials. The GCS actor table answers without the dashboard.
    """
    if not owner:
        return
    import ray
    from ray.train.v2._internal.execution.context import get_train_context

    try:
        dead = ray._private.state.actors(actor_id=owner).get("State") == "DEAD"
    except Exception:  # private API moved: keep training rather than guess
        return
    if dead:
        # Kill the controller, then free this run's placement group: it outlives its creator and
        # would hold the CPUs/GPUs for the rest of the session. Removing it also ends this worker.
        ray.kill(get_train_context().controller_actor, no_restart=True)
        pg = ray.util.get_current_placement_group()
        if pg is not None:
            ray.util.remove_placement_group(pg)
        raise SystemExit(f"the Tune trial {owner} that launched this run is gone; stopping")


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train worker entry: build the Trainer, resume from Ray's checkpoint, run, report."""
    import ray.train
    import ray.train.torch

    # Train echoes every report at INFO through this logger; the run prints its own dev curve.
    import ray.train.v2._internal.execution.context as train_context

    from trainables.loop import Trainer

    train_context.logger.setLevel(logging.WARNING)  # named by __file__, not a dotted name
    owner = config.get("owner")
    _stop_if_orphaned(owner)
    cfg = RunConfig.from_dict(config["run"])
    # Ray sets threads from the (fractional) CPU request; use the whole CPUs the trial asked for.
    import torch

    torch.set_num_threads(config.get("threads", 1))
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    wrap = None
    if world > 1:  # heads idle on text batches -> DDP must tolerate unused parameters
        def wrap(m):
            return ray.train.torch.prepare_model(
                m, parallel_strategy_kwargs={"find_unused_parameters": True})
    trainer = Trainer(cfg, device=device, rank=rank, world=world, wrap_model=wrap)
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            trainer.load_state(Path(d))
    workdir = Path(tempfile.mkdtemp(prefix="mmemb-ckpt-"))
    # Named in every report so a Tune driver can free it if it stops this trial (see launch.py).
    pg = ray.util.get_current_placement_group()
    pg_id = pg.id.hex() if pg is not None else ""

    def report(metrics: dict[str, Any], ckpt_dir: Path | None) -> None:
        _stop_if_orphaned(owner)
        metrics = {**metrics, "placement_group": pg_id}
        if rank == 0:
            print(f"step {metrics['step']:>6d}/{trainer.total_steps}  loss {metrics['loss/total']:.4f}"
                  f"  STS-B dev {metrics['stsb_dev']:.2f}  (best {metrics['best_stsb_dev']:.2f})",
                  flush=True)
        if ckpt_dir is not None:
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(str(ckpt_dir)))
            shutil.rmtree(ckpt_dir, ignore_errors=True)  # Ray has copied it to storage
        else:
            ray.train.report(metrics)

    final = trainer.fit(report, workdir)
    node = ray.get_runtime_context().get_node_id()  # where the run ended (multi-node checks)
    metrics = {"step": trainer.step, FINAL_KEY: 1, "node_id": node, "placement_group": pg_id,
               **final}
    if rank == 0:
        out = workdir / "final"
        trainer.save_state(out)
        trainer.export_best(out / "model")
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(str(out)))
    else:
        ray.train.report(metrics)
    shutil.rmtree(workdir, ignore_errors=True)


def run_torch_trainer(cfg: RunConfig, name: str, storage_path: str, callbacks: list | None = None,
                      max_failures: int = 0, cpus: float = 1.0, gpus: float = 1.0,
                      owner: str | None = None):
    """Build and fit the TorchTrainer of one run; returns Ray's Result (raises on failure).

    ``cpus``/``gpus`` are per worker; a fractional ``gpus`` packs several runs on one GPU (Ray's
    fractions are logical: size the runs to fit the GPU's memory). ``owner`` is the calling Tune
    trial's actor id, so the run ends itself if the trial is stopped.
    """
    import ray.train
    from ray.train.torch import TorchTrainer

    from trainables.faults import forwarded_env

    use_gpu = bool(cfg.use_gpu) if cfg.use_gpu is not None else _cluster_has_gpu()
    use_gpu = use_gpu and gpus > 0
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"run": cfg.to_dict(), "threads": max(1, round(cpus)), "owner": owner},
        scaling_config=ray.train.ScalingConfig(
            num_workers=cfg.num_workers, use_gpu=use_gpu,
            resources_per_worker={"CPU": cpus,
                                  **({"GPU": gpus} if use_gpu else {})},
        ),
        run_config=ray.train.RunConfig(
            name=name, storage_path=storage_path, callbacks=callbacks or [],
            failure_config=ray.train.FailureConfig(max_failures=max_failures),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=1),
            # Keep Train's INFO echo of every report out of the terminal; prints stay plain.
            logging_config=ray.train.LoggingConfig(log_level="WARNING"),
            worker_runtime_env={"env_vars": {
                "RAY_TRAIN_ENABLE_PRINT_PATCH": "0", "TRANSFORMERS_VERBOSITY": "error",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false",
                **forwarded_env()}},
        ),
    )
    return trainer.fit()


def storage_uri(path: str) -> str:
    """Absolute local folder, or a URI (s3://, gs://, ...) passed through untouched."""
    return path if "://" in path else str(Path(path).resolve())


def _cluster_has_gpu() -> bool:
    import ray

    return ray.is_initialized() and ray.cluster_resources().get("GPU", 0) > 0


def init_ray(address: str | None = None, num_cpus: int | None = None, log_to_driver: bool = True):
    """Join a cluster (``address``) or start a light embedded Ray (settings from ecosystem.md)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")
    os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
    # Tune's new console output prints its config box and a TensorBoard hint even at verbose=0;
    # the legacy reporter honours it, and our callback prints the live view.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    if ray.is_initialized():
        return
    # Ray's own INFO/WARNING lines in workers (report echoes, state-API retries without a
    # dashboard) would drown the dev curve the run prints; errors still come through.
    quiet = ray.LoggingConfig(log_level="ERROR")
    if address:
        ray.init(address=address, log_to_driver=log_to_driver, logging_config=quiet)
        return
    ray.init(
        # "local": always a fresh embedded instance, never a cluster someone `ray start`ed here
        address="local",
        num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=log_to_driver,
        object_store_memory=200 * 2**20, logging_config=quiet,
        _system_config={"enable_worker_prestart": False, "prestart_worker_first_driver": False},
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainables.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file of run settings (nested or dotted keys)")
    p.add_argument("--profile", help="demo | paper | FILE.yaml (data, encoder, teachers)")
    p.add_argument("--method", help="simcse | mcse | kdmcse | dalr (shortcut for objective.method)")
    p.add_argument("--storage", default="runs/ray", help="Ray storage path for checkpoints")
    p.add_argument("--address", help="Ray address to join (default: embedded local Ray)")
    p.add_argument("--max-failures", type=int, default=0, help="worker-group restarts on failure")
    p.add_argument("overrides", nargs="*", help="key=value settings, e.g. lr=2e-5 seed=3")
    args = p.parse_args(argv)
    from trainables.profiles import build_config

    try:
        overrides = load_yaml(args.config) if args.config else {}
        overrides.update(parse_cli_overrides(args.overrides))
        cfg = build_config(args.profile, args.method, overrides)
        from trainables.data import check_dims, load_data

        check_dims(cfg, load_data(cfg))  # bad data fails here, before Ray starts
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"run {cfg.config_hash()}: {cfg.objective.method} on {cfg.encoder}, seed {cfg.seed}")
    init_ray(args.address)
    storage = storage_uri(args.storage)
    try:
        result = run_torch_trainer(cfg, f"run-{cfg.config_hash()}", storage,
                                   max_failures=args.max_failures)
    except Exception as e:  # Train V2 raises the workers' error from fit()
        print(f"error: run failed: {root_cause(e)}", file=sys.stderr)
        return 1
    m = result.metrics or {}
    print_final(m)
    if result.checkpoint is not None:
        print(f"best model: {result.checkpoint.path}/model")
    return 0


def root_cause(err: BaseException) -> str:
    """The last ``SomeError: message`` line of a (remote) traceback, e.g. a NonFiniteLoss."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ": " in ln and ln.split(": ", 1)[0].rsplit(".", 1)[-1]
              .endswith(("Error", "Loss", "Exception"))]
    last = errors[-1] if errors else (lines[-1] if lines else repr(err))
    head, _, msg = last.partition(": ")
    return f"{head.rsplit('.', 1)[-1]}: {msg}"[:500] if msg else last[:500]


def print_final(m: dict[str, Any]) -> None:
    tasks = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"]
    print("best STS-B dev {:.2f} at step {}".format(m.get("best_stsb_dev", float("nan")),
                                                    m.get("best_step")))
    print(" ".join(f"{t:>8s}" for t in tasks))
    print(" ".join(f"{m.get('test/' + t, float('nan')):8.2f}" for t in tasks))
    if "test/alignment" in m:
        print(f"alignment {m['test/alignment']:.3f}  uniformity {m['test/uniformity']:.3f}")


if __name__ == "__main__":
    sys.exit(main())
