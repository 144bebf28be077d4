"""Does Ray free the placement group of a Train run whose controller died? (docs/ecosystem-notes.md §4)

Launches a one-worker ``TorchTrainer`` from an actor, as a Tune trial does, waits until it
trains, kills either the run's controller process (a crash) or the launching actor (what Tune
does to a stopped trial), and reports whether the run's placement group is REMOVED in time.
Nothing here frees the group: this measures Ray alone (with or without ``ray[default]``).

    python bench/placement_cleanup.py --victim controller                 # embedded Ray
    python bench/placement_cleanup.py --victim trial --address $RAY_ADDRESS --dashboard
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def _train(config: dict) -> None:
    import ray.train

    for i in range(10**6):
        ray.train.report({"i": i})
        time.sleep(0.3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--victim", choices=("controller", "trial"), default="controller")
    ap.add_argument("--address", help="join a `ray start` cluster (default: embedded Ray)")
    ap.add_argument("--dashboard", action="store_true", help="embedded Ray with the dashboard")
    ap.add_argument("--wait", type=float, default=30.0, help="seconds to watch after the kill")
    a = ap.parse_args()

    import ray
    import ray.train
    from ray._private.state import actors
    from ray.train.torch import TorchTrainer
    from ray.util import placement_group_table

    @ray.remote(num_cpus=0)
    class Launcher:
        def run(self, storage: str) -> None:
            TorchTrainer(_train, scaling_config=ray.train.ScalingConfig(
                num_workers=1, resources_per_worker={"CPU": 1}),
                run_config=ray.train.RunConfig(name="probe", storage_path=storage)).fit()

    if a.address:
        ray.init(address=a.address, log_to_driver=False)
    else:
        ray.init(address="local", num_cpus=2, include_dashboard=a.dashboard, log_to_driver=False,
                 object_store_memory=100 * 2**20)
    try:
        import aiohttp_cors  # noqa: F401  (ray[default]'s extras; plain ray[tune] lacks them)
        import opencensus  # noqa: F401
        default = True
    except ImportError:
        default = False

    def alive(cls: str) -> list[dict]:
        return [x for x in actors().values() if x["ActorClassName"].startswith(cls)
                and x["State"] == "ALIVE"]

    def groups() -> list[str]:
        return [k for k, v in placement_group_table().items() if v["state"] != "REMOVED"]

    launcher = Launcher.remote()
    launcher.run.remote(tempfile.mkdtemp())
    while not (alive("TrainController") and alive("RayTrainWorker")):
        time.sleep(0.5)
    time.sleep(3)  # a few reports into the run
    held = groups()
    if a.victim == "controller":
        os.kill(int(alive("TrainController")[0]["Pid"]), 9)
    else:
        ray.kill(launcher)
    t0 = time.monotonic()
    while groups() and time.monotonic() - t0 < a.wait:
        time.sleep(0.5)
    left = groups()
    how = "freed in %.1f s" % (time.monotonic() - t0) if not left else f"NOT freed in {a.wait:g} s"
    print(f"ray {ray.__version__}, ray[default] extras {'present' if default else 'absent'}, "
          f"{'cluster ' + a.address if a.address else 'embedded'}"
          f"{', dashboard' if a.dashboard else ''}: killed the {a.victim} holding {held}: {how}")
    ray.shutdown()


if __name__ == "__main__":
    main()
