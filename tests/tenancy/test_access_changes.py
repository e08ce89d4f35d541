"""The access-change feed, written by every change that withdraws access and read by the watcher.

On both back ends: each withdrawal (revoke, rotate, a key changed, a team changed or
disabled, a project or organisation disabled) writes one row naming its subject, in
its own transaction (a refused change writes none); a ChangeWatcher over the real
store drops exactly the cached keys each change names. On PostgreSQL: rows committed
out of id order are all applied, and NOTIFY wakes the watcher long before its poll.
With Redis: a published notice wakes it too.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

import pytest

from fairgate.auth import Change, ChangeWatcher, Grant, KeyCache, sha256
from fairgate.core.errors import Forbidden
from fairgate.core.principal import Principal
from fairgate.state import RedisNotices
from fairgate.store import (
    PostgresChangeListener,
    Store,
    StoreChangeFeed,
    access_changes,
    from_unix,
)
from fairgate.tenancy import Tenancy
from store.backends import FakeClock
from tenancy.world import DECLARED, OPERATOR, World, build_world


@pytest.fixture
async def world(tenancy: Tenancy) -> World:
    return await build_world(tenancy)


async def feed(store: Store, after: int = 0) -> list[tuple[str, str]]:
    async with store.read() as conn:
        return [(c.kind, c.subject) for c in await access_changes.since(conn, after)]


async def newest(store: Store) -> int:
    async with store.read() as conn:
        return await access_changes.latest_id(conn)


async def test_every_change_that_withdraws_access_writes_the_feed(
    tenancy: Tenancy, store: Store
) -> None:
    await tenancy.sync_orgs(DECLARED)
    await tenancy.orgs.create(OPERATOR, "C")
    await tenancy.teams.create(OPERATOR, org="C", name="c1")
    await tenancy.projects.create(OPERATOR, team="a1", name="p")
    one = await tenancy.keys.create(OPERATOR, team="a1")
    two = await tenancy.keys.create(OPERATOR, team="a1", project="p")
    mark = await newest(store)

    await tenancy.keys.revoke(OPERATOR, one.key.id)
    await tenancy.keys.revoke(OPERATOR, one.key.id)  # a no-op: nothing new to withdraw
    await tenancy.keys.rotate(OPERATOR, two.key.id, grace=0)
    await tenancy.keys.update(OPERATOR, two.key.id, models=["llama-8b"])
    await tenancy.teams.update(OPERATOR, "a2", models=[])
    await tenancy.projects.disable(OPERATOR, team="a1", name="p")
    await tenancy.teams.disable(OPERATOR, "c1")
    await tenancy.orgs.disable(OPERATOR, "C")

    assert await feed(store, mark) == [
        ("key", one.key.id),
        ("key", two.key.id),
        ("key", two.key.id),
        ("team", "a2"),
        ("project", "a1/p"),
        ("team", "c1"),
        ("org", "C"),
    ]


async def test_a_refused_change_writes_nothing(world: World, store: Store) -> None:
    mark = await newest(store)
    mia_key = world.keys["mia"]
    with pytest.raises(Forbidden):
        await world.tenancy.keys.revoke(await world.actor("val"), mia_key)  # reads, not writes
    assert await feed(store, mark) == []
    await world.tenancy.keys.revoke(await world.actor("mia"), mia_key)
    assert await feed(store, mark) == [("key", mia_key)]


def cached(cache: KeyCache, n: int, key_id: str, team: str, org: str) -> bytes:
    digest = sha256(f"fg-{n}")
    cache.add_hit(digest, Grant(Principal(key_id=key_id, org=org, team=team)))
    return digest


async def test_the_watcher_drops_the_cached_keys_each_change_names(
    tenancy: Tenancy, store: Store, clock: FakeClock
) -> None:
    await tenancy.sync_orgs(DECLARED)
    one = await tenancy.keys.create(OPERATOR, team="a1")
    other = await tenancy.keys.create(OPERATOR, team="a1")
    cache = KeyCache(100, 3600.0, 100, 3600.0, clock)
    watcher = ChangeWatcher(StoreChangeFeed(store), cache, clock, interval=0.5)
    await watcher.start()
    revoked = cached(cache, 1, one.key.id, "a1", "A")
    kept = cached(cache, 2, other.key.id, "a1", "A")
    in_a2 = cached(cache, 3, "k-a2", "a2", "A")
    in_b1 = cached(cache, 4, "k-b1", "b1", "B")

    await tenancy.keys.revoke(OPERATOR, one.key.id)
    assert await watcher.read() == 1
    assert cache.hit(revoked) is None and cache.hit(kept) is not None

    await tenancy.teams.update(OPERATOR, "a2", models=["llama-8b"])  # an allowlist narrowed
    assert await watcher.read() == 1
    assert cache.hit(in_a2) is None and cache.hit(in_b1) is not None
    assert await watcher.read() == 0  # each change is applied once


async def test_the_watcher_hands_on_the_rows_it_applied_after_the_cache_dropped_them(
    tenancy: Tenancy, store: Store, clock: FakeClock
) -> None:
    await tenancy.sync_orgs(DECLARED)
    key = await tenancy.keys.create(OPERATOR, team="a1")
    cache = KeyCache(100, 3600.0, 100, 3600.0, clock)
    digest = cached(cache, 1, key.key.id, "a1", "A")
    handed: list[list[tuple[str, str, bool]]] = []

    def on_changes(rows: Sequence[Change]) -> None:  # the cache already dropped the key
        handed.append([(r.kind, r.subject, cache.hit(digest) is None) for r in rows])

    watcher = ChangeWatcher(
        StoreChangeFeed(store), cache, clock, interval=0.5, on_changes=on_changes
    )
    await watcher.start()
    await tenancy.keys.revoke(OPERATOR, key.key.id)
    await tenancy.teams.update(OPERATOR, "a2", models=["llama-8b"])
    assert await watcher.read() == 2
    assert handed == [[("key", key.key.id, True), ("team", "a2", True)]]
    assert await watcher.read() == 0
    assert len(handed) == 1  # nothing new: not called


@pytest.mark.postgres
async def test_rows_committed_out_of_id_order_are_all_applied(
    pg_store_url: str, clock: FakeClock
) -> None:
    store = Store(pg_store_url)
    await store.connect()
    try:
        cache = KeyCache(100, 3600.0, 100, 3600.0, clock)
        watcher = ChangeWatcher(StoreChangeFeed(store), cache, clock, interval=0.5)
        await watcher.start()
        early = cached(cache, 1, "k-early", "t", "o")
        late = cached(cache, 2, "k-late", "t", "o")
        now = store_now(clock)
        inserted = asyncio.Event()
        commit = asyncio.Event()

        async def slow_writer() -> None:
            async with store.write() as conn:
                await access_changes.record(conn, "key", "k-early", now)  # the lower id
                inserted.set()
                await commit.wait()

        slow = asyncio.create_task(slow_writer())
        await inserted.wait()
        async with store.write() as conn:
            await access_changes.record(conn, "key", "k-late", now)  # a higher id, first in
        assert await watcher.read() == 1
        assert cache.hit(late) is None and cache.hit(early) is not None
        commit.set()
        await slow
        assert await watcher.read() == 1
        assert cache.hit(early) is None
    finally:
        await store.close()


def store_now(clock: FakeClock) -> datetime:
    return from_unix(clock.wall())


@pytest.fixture
async def pg_store(pg_store_url: str) -> AsyncIterator[Store]:
    store = Store(pg_store_url)
    await store.connect()
    try:
        yield store
    finally:
        await store.close()


async def dropped_soon(cache: KeyCache, digest: bytes) -> bool:
    for _ in range(100):  # at most 5 s, far below the watcher's minute
        if cache.hit(digest) is None:
            return True
        await asyncio.sleep(0.05)
    return False


async def watched(watcher: ChangeWatcher) -> asyncio.Task[None]:
    await watcher.start()
    task = asyncio.create_task(watcher.run())
    await asyncio.sleep(0.5)  # subscribed
    return task


@pytest.mark.postgres
async def test_notify_wakes_the_watcher_long_before_its_poll(
    pg_store: Store, clock: FakeClock
) -> None:
    cache = KeyCache(100, 3600.0, 100, 3600.0, clock)
    listener = PostgresChangeListener(pg_store)
    watcher = ChangeWatcher(
        StoreChangeFeed(pg_store), cache, clock, interval=60.0, wakers=[listener]
    )
    task = await watched(watcher)
    try:
        assert listener.listening
        digest = cached(cache, 1, "k1", "t", "o")
        async with pg_store.write() as conn:
            await access_changes.record(conn, "key", "k1", store_now(clock))
        assert await dropped_soon(cache, digest)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_redis_notice_wakes_the_watcher_long_before_its_poll(
    store: Store, clock: FakeClock, redis_url: str
) -> None:
    prefix = f"fg-test:{os.urandom(6).hex()}:"
    publisher = RedisNotices(redis_url, prefix=prefix, timeout=1.0)
    subscriber = RedisNotices(redis_url, prefix=prefix, timeout=1.0)
    store.on_commit(access_changes.TOPIC, publisher.publish)
    cache = KeyCache(100, 3600.0, 100, 3600.0, clock)
    watcher = ChangeWatcher(
        StoreChangeFeed(store), cache, clock, interval=60.0, wakers=[subscriber]
    )
    task = await watched(watcher)
    try:
        digest = cached(cache, 1, "k1", "t", "o")
        async with store.write() as conn:
            await access_changes.record(conn, "key", "k1", store_now(clock))
        assert await dropped_soon(cache, digest)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await publisher.aclose()
