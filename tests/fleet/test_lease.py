"""Two control planes on one real store: only the lease holder places and sends desired
states; the standby refuses the agents' streams and routes what the store holds; once the
holder stops renewing (it crashed) the standby takes over with the same replicas. A
gateway without a control plane follows the store's replicas into its registry. On
SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.fleet.test_controller import SETTINGS, SIM, Clock, make_replica, register, report

from fairgate.fleet.controller import FleetController, ReplicaNotFound
from fairgate.fleet.follow import StoreRoutes
from fairgate.fleet.v1 import fleet_pb2
from fairgate.store import Store, upgrade
from fairgate.store import fleet as rows
from fairgate.upstream import ReplicaRegistry


class Wall:
    def __init__(self) -> None:
        self.at = datetime(2026, 12, 3, 8, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.at


def controller(store: Store, clock: Clock, wall: Wall, holder: str) -> FleetController:
    return FleetController(
        SETTINGS,
        (SIM,),
        store,
        ReplicaRegistry([]),
        make_replica,
        clock=clock,
        now=wall,
        holder=holder,
    )


def routed(c: FleetController | StoreRoutes) -> list[str]:
    return sorted(r.name for r in c.registry.replicas("chat"))


async def test_only_the_holder_places_and_the_standby_takes_over_when_it_expires(
    store: Store,
) -> None:
    clock, wall = Clock(), Wall()
    first, second = controller(store, clock, wall, "cp-a"), controller(store, clock, wall, "cp-b")
    await first.load()
    await second.load()
    assert (first.leading, second.leading) == (True, False)
    assert not second.service._accepting()  # the standby refuses the agents' streams
    assert "on standby" in second.placement_view()[0]["reason"]
    gpu01 = await register(first, "gpu01")
    gpu02 = await register(first, "gpu02")
    clock.now += SETTINGS.unreachable_after
    for seen in (gpu01, gpu02):
        first.nodes[seen.name].last_seen = clock.now
    await first.tick()
    await second.tick()
    placed = sorted(first.replicas)
    assert len(placed) == 2
    assert second.replicas == {} and second.service.desired("gpu01").version == 0
    for rid in placed:
        await report(first, gpu01 if "gpu01" in rid else gpu02, rid, "ready", pid=7)
    await second.tick()  # the standby routes the ready replicas from the store
    assert routed(second) == placed

    # The holder keeps its lease while it renews...
    for _ in range(4):
        clock.now += SETTINGS.lease_ttl / 2
        wall.at += timedelta(seconds=SETTINGS.lease_ttl / 2)
        for node in first.nodes.values():
            node.last_seen = clock.now  # the agents' heartbeats
        await first.tick()
        await second.tick()
        assert (first.leading, second.leading) == (True, False)
    # ...and once it stops (crashed), the standby takes the lease over after it expires.
    wall.at += timedelta(seconds=SETTINGS.lease_ttl - 1)
    clock.now += SETTINGS.lease_ttl - 1
    await second.tick()
    assert not second.leading
    wall.at += timedelta(seconds=2)
    clock.now += 2
    await second.tick()
    assert second.leading
    assert sorted(second.replicas) == placed  # loaded, nothing placed anew
    assert routed(second) == placed
    running = {
        name: [
            fleet_pb2.ReplicaStatus(replica_id=r, state="ready", pid=7) for r in placed if name in r
        ]
        for name in ("gpu01", "gpu02")
    }
    for name in ("gpu01", "gpu02"):
        await register(second, name, running=running[name])
    clock.now += SETTINGS.unreachable_after
    for name in ("gpu01", "gpu02"):
        second.nodes[name].last_seen = clock.now
    await second.tick()
    assert sorted(second.replicas) == placed  # the same ids: the agents relaunch nothing
    assert [s.replica_id for s in second.service.desired("gpu01").replicas] == [
        rid for rid in placed if "gpu01" in rid
    ]
    # The old holder, back, finds the lease taken: it steps down and places nothing.
    await first.tick()
    assert not first.leading and first.replicas == {}
    async with store.read() as conn:
        lease = await rows.read_lease(conn)
    assert lease is not None and lease.holder == "cp-b"


async def test_a_gateway_without_a_control_plane_routes_the_stores_ready_replicas(
    store: Store, tmp_path: Path
) -> None:
    clock, wall = Clock(), Wall()
    cp = controller(store, clock, wall, "cp-a")
    await cp.load()
    gpu01 = await register(cp, "gpu01")
    gpu02 = await register(cp, "gpu02")
    clock.now += SETTINGS.unreachable_after
    for node in cp.nodes.values():
        node.last_seen = clock.now
    await cp.tick()
    placed = sorted(cp.replicas)
    follower = StoreRoutes((SIM,), store, ReplicaRegistry([]), make_replica)
    await follower.sync()
    assert routed(follower) == []  # placed, not ready yet
    on01 = next(rid for rid in placed if "gpu01" in rid)
    await report(cp, gpu01, on01, "ready", pid=7)
    await follower.sync()
    assert routed(follower) == [on01]
    assert follower.registry.replicas("chat")[0].url == f"http://127.0.0.1:{cp.replicas[on01].port}"
    await cp.set_flags("gpu01", draining=True)  # its node drains: replaced first
    await follower.sync()
    assert routed(follower) == [on01]  # serving until its replacement is ready
    for rid in [rid for rid in cp.replicas if "gpu02" in rid]:
        await report(cp, gpu02, rid, "ready", pid=8)
    await cp.tick()
    await follower.sync()
    assert routed(follower) == sorted(rid for rid in cp.replicas if rid != on01)
    assert on01 not in routed(follower) and len(routed(follower)) == 2


async def test_a_restart_asked_of_the_standby_reaches_the_holder(store: Store) -> None:
    # an operator's `fairgate replicas restart` may reach either control plane's admin API
    clock, wall = Clock(), Wall()
    first, second = controller(store, clock, wall, "cp-a"), controller(store, clock, wall, "cp-b")
    await first.load()
    await second.load()
    gpu01 = await register(first, "gpu01")
    clock.now += SETTINGS.unreachable_after
    first.nodes["gpu01"].last_seen = clock.now
    await first.tick()
    [rid, *_] = sorted(first.replicas)
    await report(first, gpu01, rid, "ready", pid=7)
    view = await second.restart(rid, actor="ops")
    assert (view["id"], view["generation"]) == (rid, 1)
    assert second.replicas == {}  # the standby placed nothing for it
    first.nodes["gpu01"].last_seen = clock.now
    await first.tick()
    assert first.replicas[rid].generation == 1
    sent = {r.replica_id: r.generation for r in first.service.desired("gpu01").replicas}
    assert sent[rid] == 1  # the holder sends the new generation to the agent
    with pytest.raises(ReplicaNotFound):  # the store knows no such replica: 404
        await second.restart("no-such-replica", actor="ops")


async def test_a_clean_stop_gives_the_lease_up_to_the_standby_at_once(store: Store) -> None:
    clock, wall = Clock(), Wall()
    first, second = controller(store, clock, wall, "cp-a"), controller(store, clock, wall, "cp-b")
    await first.load()
    await second.load()
    await first.release()  # SIGTERM
    clock.now += 1.0
    wall.at += timedelta(seconds=1)
    await first.tick()  # a tick still running as it stops takes nothing back
    await second.tick()
    assert (first.leading, second.leading) == (False, True)


async def test_a_holder_that_cannot_renew_stops_acting_when_its_lease_would_expire(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fleet.db"
    store = Store(f"sqlite:///{path}", timeout=0.2)
    await store.connect()
    await upgrade(store)
    clock, wall = Clock(), Wall()
    holder = controller(store, clock, wall, "cp-a")
    try:
        await holder.load()
        assert holder.leading
        writer = sqlite3.connect(path)  # another process holds the write lock: no renewal
        writer.execute("BEGIN IMMEDIATE")
        clock.now += SETTINGS.lease_ttl / 2
        wall.at += timedelta(seconds=SETTINGS.lease_ttl / 2)
        await holder.tick()
        assert holder.leading  # its lease runs until lease_ttl after its last renewal
        clock.now += SETTINGS.lease_ttl / 2
        wall.at += timedelta(seconds=SETTINGS.lease_ttl / 2)
        await holder.tick()
        assert not holder.leading  # by now another may hold it
        assert not holder.service._accepting()
        writer.rollback()
        writer.close()
        clock.now += 1.0
        wall.at += timedelta(seconds=1)
        await holder.tick()  # the store answers again: nobody took it, it is taken back
        assert holder.leading
    finally:
        await store.close()
