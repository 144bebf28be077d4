"""Placement groups that outlive their Train run, and their release from the table's driver.

A Train V2 run reserves its workers' CPUs/GPUs in a placement group made by its TrainController
actor. Ray does not remove that group when the controller dies (a node left, or Tune stopped the
trial early), and Train's own cleaner needs Ray's state API, which an install without the
dashboard lacks. Unreleased, those CPUs/GPUs starve every later trial: the table hangs. The
driver therefore releases (1) the groups of every trial that is over and (2) every group whose
creating actor is dead.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

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


def orphaned_groups() -> list[str]:
    """Hex ids of live groups whose creating actor is dead.

    Reads the GCS table raw: the public ``placement_group_table()`` leaves out the creator
    fields. Returns [] where that private API is missing (another Ray version): the per-trial
    release above still runs then.
    """
    try:
        from ray._private.state import state
        from ray.core.generated import gcs_pb2

        rows = state._connect_and_get_accessor().get_placement_group_table()
    except Exception:
        return []
    removed = gcs_pb2.PlacementGroupTableData.REMOVED
    out = []
    for raw in rows:
        pg = gcs_pb2.PlacementGroupTableData.FromString(raw)
        creator = bytes(pg.creator_actor_id)
        if (pg.state != removed and pg.creator_actor_dead and creator
                and set(creator) != set(NIL_ACTOR)):
            out.append(pg.placement_group_id.hex())
    return out


class Reaper:
    """Calls ``orphaned_groups`` at most every ``every_s`` seconds and frees what it finds."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s, self.last, self.freed = every_s, 0.0, 0

    def __call__(self) -> int:
        now = time.monotonic()
        if now - self.last < self.every_s:
            return 0
        self.last = now
        ids = orphaned_groups()
        free_placement_groups(ids)
        self.freed += len(ids)
        return len(ids)
