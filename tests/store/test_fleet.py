"""The fleet's tables: a registration keeps the operator's flags, replicas per node and port."""

from __future__ import annotations

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
