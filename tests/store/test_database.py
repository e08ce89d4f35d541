"""The store's transactions on both back ends: committed, rolled back, or StoreUnavailable."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from fairgate.core.errors import StoreUnavailable
from fairgate.store import Store, StoreConflict, orgs
from fairgate.store.tables import orgs as orgs_table

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


async def _count(store: Store) -> int:
    async with store.read() as conn:
        return int((await conn.execute(select(func.count()).select_from(orgs_table))).scalar_one())


async def test_a_write_commits_when_the_block_ends(store: Store) -> None:
    async with store.write() as conn:
        await orgs.insert_org(conn, name="etabA", share=0.5, declared=True, now=NOW)
    assert await _count(store) == 1


async def test_an_exception_inside_the_block_rolls_everything_back(store: Store) -> None:
    with pytest.raises(RuntimeError):
        async with store.write() as conn:
            await orgs.insert_org(conn, name="etabA", share=0.5, declared=True, now=NOW)
            raise RuntimeError("changed my mind")
    assert await _count(store) == 0


async def test_a_taken_name_is_a_conflict_and_nothing_is_written(store: Store) -> None:
    async with store.write() as conn:
        await orgs.insert_org(conn, name="etabA", share=0.5, declared=True, now=NOW)
    with pytest.raises(StoreConflict):
        async with store.write() as conn:
            await orgs.insert_org(conn, name="etabB", share=None, declared=False, now=NOW)
            await orgs.insert_org(conn, name="etabA", share=None, declared=False, now=NOW)
    assert [o.name for o in await _list(store)] == ["etabA"]


async def _list(store: Store) -> list[orgs.Org]:
    async with store.read() as conn:
        return await orgs.list_orgs(conn)


async def test_timestamps_come_back_in_utc(store: Store) -> None:
    local = datetime(2025, 6, 1, 14, 0).astimezone()  # whatever zone the machine is in
    async with store.write() as conn:
        await orgs.insert_org(conn, name="o", share=None, declared=False, now=local)
    (org,) = await _list(store)
    assert org.created_at.tzinfo is UTC
    assert org.created_at == local


async def test_a_broken_statement_is_store_unavailable_not_a_driver_error(store: Store) -> None:
    with pytest.raises(StoreUnavailable) as caught:
        async with store.read() as conn:
            await conn.execute(text("SELECT * FROM no_such_table"))
    assert "did not answer" in str(caught.value)


async def test_an_unreachable_postgresql_is_store_unavailable() -> None:
    store = Store("postgresql://nobody@127.0.0.1:1/none", timeout=2.0)
    with pytest.raises(StoreUnavailable):
        await store.connect()
    await store.close()


async def test_a_sqlite_file_that_cannot_be_opened_is_store_unavailable(tmp_path: Path) -> None:
    threads = threading.active_count()
    store = Store(f"sqlite:///{tmp_path}/missing-dir/x.db", timeout=1.0)
    with pytest.raises(StoreUnavailable):
        await store.connect()
    await store.close()
    # aiosqlite stops the worker thread of a failed connection without waiting for it;
    # let it finish while this test's event loop still runs.
    for _ in range(100):
        if threading.active_count() <= threads:
            break
        await asyncio.sleep(0.05)


async def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/x.db")
    await store.connect()
    try:
        async with store.read() as conn:
            mode = (await conn.execute(text("PRAGMA journal_mode"))).scalar_one()
            keys = (await conn.execute(text("PRAGMA foreign_keys"))).scalar_one()
        assert (mode, keys) == ("wal", 1)
    finally:
        await store.close()


async def test_a_writer_waits_for_the_lock_then_gives_up_with_store_unavailable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    store = Store(f"sqlite:///{path}", timeout=0.3)
    await store.connect()
    async with store.write() as conn:
        await conn.execute(text("CREATE TABLE t (x INTEGER)"))
    other = sqlite3.connect(path, isolation_level=None)  # another process's writer
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            async with store.write() as conn:
                await conn.execute(text("INSERT INTO t VALUES (1)"))
        async with store.read() as conn:  # readers are not blocked by the writer (WAL)
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 0
    finally:
        other.execute("ROLLBACK")
        other.close()
    async with store.write() as conn:  # the lock is free again
        await conn.execute(text("INSERT INTO t VALUES (1)"))
    await store.close()


async def test_concurrent_writers_queue_instead_of_failing(store: Store) -> None:
    async def add(i: int) -> None:
        async with store.write() as conn:
            await orgs.insert_org(conn, name=f"o{i}", share=None, declared=False, now=NOW)

    await asyncio.wait_for(asyncio.gather(*(add(i) for i in range(12))), timeout=60)
    assert await _count(store) == 12


async def test_using_a_store_before_connect_is_a_programming_error(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/x.db")
    with pytest.raises(RuntimeError, match="connect"):
        async with store.read():
            pass
