"""Placement groups that outlive their Train run, and their release from the table's driver.

A Train V2 run reserves its workers' CPUs/GPUs in a placement group made by its TrainController
actor. Ray does not remove that group when the controller dies (a node left, or Tune stopped the
trial early), and Train's own cleaner needs Ray's state API, which an install without the
dashboard lacks. Unreleased, those CPUs/GPUs starve every later trial: the table hangs. The
driver therefore releases (1) the groups of every trial that is over and (2) every group whose
creating actor is dead.

For (2) the group's own ``creator_actor_dead`` flag is not enough. When Tune stops a trial, the
controller sees its worker group vanish and asks for a new group in the same instant that Tune
kills it; that group is registered after its creator died and never gets the flag. So the
creator's state is read from the actor table as well.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from trainables.runtime.ray_env import private_state_api

NIL_ACTOR = b"\xff"
"""Groups made by a driver process (Tune's own trial groups) carry an all-0xFF creator id."""


def free_placement_groups(ids: Iterable[str]) -> None:
    """Remove these groups (hex ids) unless already removed; errors mean gone, so are ignored."""
    from ray.util import placement_group_table, remove_placement_group
    from ray.util.placement_group import PlacementGroup, PlacementGroupID

    for hex_id in ids:
        try:
            pg = PlacementGroup(PlacementGroupID.from_hex(hex_id))
            if placement_group_table(pg).get("state") not in (None, "REMOVED"):
                remove_placement_group(pg)
        except Exception:  # gone already, or the cluster is shutting down
            pass


def orphans_in(rows: Iterable[bytes], actor_state: Callable[[str], str | None]) -> list[str]:
    """Hex ids of the live groups among ``rows`` (serialised GCS PlacementGroupTableData) whose
    creating actor is dead: flagged so, or DEAD in the actor table. An unknown creator is kept."""
    from ray.core.generated import gcs_pb2

    out = []
    for raw in rows:
        pg = gcs_pb2.PlacementGroupTableData.FromString(raw)
        creator = bytes(pg.creator_actor_id)
        if pg.state == gcs_pb2.PlacementGroupTableData.REMOVED or not creator \
                or set(creator) == set(NIL_ACTOR):
            continue
        if pg.creator_actor_dead or actor_state(creator.hex()) == "DEAD":
            out.append(pg.placement_group_id.hex())
    return out


def orphaned_groups() -> list[str]:
    """Hex ids of live groups whose creating actor is dead, read from the GCS.

    Private API (the public ``placement_group_table()`` leaves out the creator): where it is
    missing (another Ray version) this warns once and returns []; only the per-trial release
    runs then.
    """
    api = private_state_api()
    if api is None:
        return []
    rows, actor_state = api
    try:
        return orphans_in(rows(), actor_state)
    except Exception:  # the GCS is shutting down or briefly unreachable: try again next time
        return []


class Reaper:
    """Calls ``orphaned_groups`` at most every ``every_s`` seconds and frees what it finds."""

    def __init__(self, every_s: float = 5.0) -> None:
        # -inf, not 0: monotonic() starts near 0 at boot, so "never" must be earlier than any now.
        self.every_s, self.last, self.freed = every_s, -math.inf, 0

    def __call__(self) -> int:
        now = time.monotonic()
        if self.last is not None and now - self.last < self.every_s:
            return 0
        self.last = now
        ids = orphaned_groups()
        free_placement_groups(ids)
        self.freed += len(ids)
        return len(ids)


def cleanup_callback(verbose: bool = True):
    """A Tune callback that frees the placement groups of finished, failed and lost runs."""
    from ray.tune import Callback

    class PlacementCleanup(Callback):
        def __init__(self) -> None:
            self.groups: dict[str, set[str]] = {}
            self.reap = Reaper()
            private_state_api()  # says so once, up front, when the reaper cannot work

        def on_trial_result(self, iteration, trials, trial, result, **info):
            if result.get("placement_group"):
                self.groups.setdefault(trial.trial_id, set()).add(result["placement_group"])

        def on_step_end(self, iteration, trials, **info):
            # Runs whose controller died (a stopped trial, a node that left) keep their groups;
            # unreleased, they starve every later trial. Freeing a stopped trial's group directly
            # would race its dying controller into asking for a new one.
            if self.reap() and verbose:
                print(f"  released placement groups of stopped or lost runs ({self.reap.freed} "
                      "so far)", flush=True)

        def on_trial_complete(self, iteration, trials, trial, **info):
            if (trial.last_result or {}).get("final"):  # the run ended itself
                free_placement_groups(self.groups.pop(trial.trial_id, ()))

        def on_trial_error(self, iteration, trials, trial, **info):
            free_placement_groups(self.groups.pop(trial.trial_id, ()))

    return PlacementCleanup()
