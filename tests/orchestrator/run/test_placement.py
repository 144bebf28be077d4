"""A placement group whose creating actor died is found and released; live and driver-made
groups are left alone (the node-leaving deadlock of issue 6)."""

from __future__ import annotations

import pytest

from orchestrator.run.placement import Reaper, free_placement_groups, orphaned_groups
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=80 * 2**20)
    yield ray
    ray.shutdown()


def _cpus(ray) -> float:
    return ray.available_resources().get("CPU", 0.0)


def _state(ray, hex_id: str) -> str | None:
    from ray.util.placement_group import PlacementGroup, PlacementGroupID

    return ray.util.placement_group_table(PlacementGroup(PlacementGroupID.from_hex(hex_id))).get("state")


def test_group_of_a_dead_actor_is_released(ray_local):
    ray = ray_local
    from ray.util.placement_group import placement_group, remove_placement_group

    @ray.remote(num_cpus=0)
    class Controller:  # stands in for Train's TrainController
        def reserve(self) -> str:
            pg = placement_group([{"CPU": 1}])
            ray.get(pg.ready())
            return pg.id.hex()

    driver_pg = placement_group([{"CPU": 0.5}])  # like Tune's own trial groups
    ray.get(driver_pg.ready())
    ctl = Controller.remote()
    mine = ray.get(ctl.reserve.remote())
    wait_for(lambda: _cpus(ray) == pytest.approx(0.5), "both groups to hold their CPUs")
    assert orphaned_groups() == []  # its creator lives: not an orphan

    ray.kill(ctl)
    wait_for(lambda: orphaned_groups() == [mine], "the killed actor's group to show as orphaned")
    # Ray knows its creator is dead and still holds it: nothing but the reaper frees it.
    assert _state(ray, mine) == "CREATED" and _cpus(ray) == pytest.approx(0.5)

    reap = Reaper(every_s=3600)
    assert reap() == 1 and reap.freed == 1  # the first call runs, however young the machine
    assert reap() == 0  # rate-limited: the GCS is read at most every every_s
    wait_for(lambda: _cpus(ray) == pytest.approx(1.5), "the freed group's CPU to come back")
    assert _state(ray, mine) == "REMOVED" and orphaned_groups() == []
    free_placement_groups([mine, "00" * 18])  # already gone or unknown: no error
    remove_placement_group(driver_pg)
    wait_for(lambda: _cpus(ray) == pytest.approx(2.0), "the driver group's CPU to come back")


def test_reaper_reads_at_once_then_at_most_every_every_s(monkeypatch):
    """The first call reads the GCS whatever the clock says: time.monotonic() counts from boot, so
    on a machine up for less than ``every_s`` a reaper starting from 0 would wait for nothing."""
    from orchestrator.run import placement

    clock = {"now": 12.0}  # booted 12 s ago
    reads, freed = [], []
    monkeypatch.setattr(placement.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(placement, "orphaned_groups", lambda: reads.append(clock["now"]) or ["aa", "bb"])
    monkeypatch.setattr(placement, "free_placement_groups", lambda ids: freed.extend(ids))
    reap = Reaper(every_s=3600)
    assert reap() == 2 and reads == [12.0] and freed == ["aa", "bb"]
    clock["now"] += 3599
    assert reap() == 0 and reads == [12.0]  # rate-limited
    clock["now"] += 1
    assert reap() == 2 and reads == [12.0, 3612.0] and reap.freed == 4


def _row(pg_id: bytes, creator: bytes, state: str = "CREATED", flagged: bool = False) -> bytes:
    from ray.core.generated import gcs_pb2

    row = gcs_pb2.PlacementGroupTableData(
        placement_group_id=pg_id, creator_actor_id=creator, creator_actor_dead=flagged,
        state=gcs_pb2.PlacementGroupTableData.PlacementGroupState.Value(state))
    return row.SerializeToString()


def test_group_registered_after_its_creator_died_is_an_orphan():
    """Seen in a search: Tune kills a stopped trial's controller while the controller, seeing its
    worker group vanish, asks for a new group; that group never gets creator_actor_dead."""
    from orchestrator.run.placement import orphans_in

    dead, alive, nil = b"\x01" * 16, b"\x02" * 16, b"\xff" * 16
    rows = [
        _row(b"\xa1" * 18, dead),                       # flag unset, actor table says DEAD
        _row(b"\xa2" * 18, alive, flagged=False),       # a running run: kept
        _row(b"\xa3" * 18, nil),                        # a driver's (Tune's) group: kept
        _row(b"\xa4" * 18, alive, flagged=True),        # flagged dead by the GCS
        _row(b"\xa5" * 18, dead, state="REMOVED"),      # already gone
        _row(b"\xa6" * 18, b"\x03" * 16),               # creator unknown to the table: kept
    ]
    states = {dead.hex(): "DEAD", alive.hex(): "ALIVE"}
    assert orphans_in(rows, states.get) == [(b"\xa1" * 18).hex(), (b"\xa4" * 18).hex()]


def test_first_reap_runs_on_a_freshly_booted_machine(monkeypatch):
    """time.monotonic() counts from boot: a fresh CI machine is younger than every_s."""
    import orchestrator.run.placement as placement

    monkeypatch.setattr(placement.time, "monotonic", lambda: 1.0)
    monkeypatch.setattr(placement, "orphaned_groups", lambda: ["ab" * 18])
    freed: list[list[str]] = []
    monkeypatch.setattr(placement, "free_placement_groups", lambda ids: freed.append(list(ids)))
    reap = Reaper(every_s=5.0)
    assert reap() == 1 and freed == [["ab" * 18]]
    assert reap() == 0  # and then rate-limited


def test_missing_private_api_warns_once_instead_of_going_quiet(monkeypatch, capsys):
    """Where Ray moves ray._private.state, the reaper and the orphan check say so, once."""
    import ray._private.state

    import trainables.runtime.ray_env as ray_env
    from trainables.train import _stop_if_orphaned

    monkeypatch.setattr(ray_env, "_warned", set())
    monkeypatch.delattr(ray._private.state, "actors")
    assert orphaned_groups() == [] and orphaned_groups() == []
    _stop_if_orphaned("00" * 16)  # a Train worker's check: keeps training, says why once
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning: ")]
    assert len(lines) == 1, lines
    assert "ray._private.state" in lines[0] and "not released automatically" in lines[0]
