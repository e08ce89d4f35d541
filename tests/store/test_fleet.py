"""The fleet's tables: a registration keeps the operator's flags, replicas per node and port."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from fairgate.store import Store, StoreConflict, fleet

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)


async def test_a_new_registration_keeps_the_cordon_and_the_desired_version(store: Store) -> None:
    async with store.write() as conn:
        await fleet.save_node(
            conn,
            name="gpu01",
            labels={"zone": "a"},
            inventory='{"source": "none"}',
            address="10.0.0.1",
            state="healthy",
            now=NOW,
        )
        await fleet.set_flags(conn, "gpu01", cordoned=True)
        await fleet.update_node(conn, "gpu01", desired_version=7)
    later = NOW + timedelta(minutes=5)
    async with store.write() as conn:
        row = await fleet.save_node(
            conn,
            name="gpu01",
            labels={"zone": "b"},
            inventory='{"source": "none"}',
            address="10.0.0.2",
            state="healthy",
            now=later,
        )
    assert (row.cordoned, row.draining, row.desired_version) == (True, False, 7)
    assert (row.labels, row.address, row.registered_at) == ({"zone": "b"}, "10.0.0.2", NOW)
    assert row.last_heartbeat_at == later
    async with store.read() as conn:
        assert await fleet.set_flags(conn, "gpu99", cordoned=True) is None


async def test_two_replicas_cannot_share_a_port_on_one_node(store: Store) -> None:
    async with store.write() as conn:
        await fleet.save_node(
            conn,
            name="gpu01",
            labels={},
            inventory="{}",
            address="",
            state="healthy",
            now=NOW,
        )
        await fleet.add_replica(
            conn,
            id="chat-1",
            model="chat",
            node="gpu01",
            gpus=[0, 1],
            port=20000,
            desired_version=1,
            now=NOW,
        )
    with pytest.raises(StoreConflict):
        async with store.write() as conn:
            await fleet.add_replica(
                conn,
                id="chat-2",
                model="chat",
                node="gpu01",
                gpus=[2],
                port=20000,
                desired_version=2,
                now=NOW,
            )
    async with store.write() as conn:
        await fleet.update_replica(conn, "chat-1", now=NOW, state="ready", pid=42)
        [row] = await fleet.list_replicas(conn, model="chat")
    assert (row.id, row.gpus, row.state, row.pid) == ("chat-1", (0, 1), "ready", 42)


async def _take(store: Store, holder: str, now: datetime, ttl: float = 15.0) -> bool:
    try:
        async with store.write() as conn:
            return await fleet.take_lease(conn, holder, now=now, ttl=ttl)
    except StoreConflict:
        return False


async def test_of_two_control_planes_racing_for_the_lease_only_one_holds_it(
    store: Store, store_url: str
) -> None:
    other = Store(store_url)  # a second process: its own connections
    await other.connect()
    try:
        for round_ in range(5):
            at = NOW + timedelta(minutes=round_)  # each round: the last lease expired
            won = await asyncio.gather(_take(store, "a", at), _take(other, "b", at))
            assert sorted(won) == [False, True], won
            async with store.read() as conn:
                lease = await fleet.read_lease(conn)
            assert lease is not None
            assert lease.holder == ("a" if won[0] else "b")
            assert lease.expires_at == at + timedelta(seconds=15)
    finally:
        await other.close()


async def test_the_holder_renews_and_a_standby_takes_over_only_once_it_expired(
    store: Store,
) -> None:
    assert await _take(store, "a", NOW)
    assert not await _take(store, "b", NOW + timedelta(seconds=5))
    assert await _take(store, "a", NOW + timedelta(seconds=10))  # renewed until 25 s
    assert not await _take(store, "b", NOW + timedelta(seconds=24))
    assert await _take(store, "b", NOW + timedelta(seconds=25))  # a crashed: expired
    assert not await _take(store, "a", NOW + timedelta(seconds=26))  # and cannot come back
    async with store.write() as conn:
        assert not await fleet.drop_lease(conn, "a", now=NOW + timedelta(seconds=27))
        assert await fleet.drop_lease(conn, "b", now=NOW + timedelta(seconds=27))
    assert await _take(store, "a", NOW + timedelta(seconds=27))  # given up: taken at once
