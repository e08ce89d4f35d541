"""Fair-share state that only Redis has: several gateways, leases that expire, outages."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from redis.asyncio import Redis

from fairgate.limits import StateUnavailable
from fairgate.state import Breaker, RedisCounterStore
from redis_keys import delete_prefix
from redis_server import free_port, private_redis_server, scripts_waiting

pytestmark = pytest.mark.redis

T0 = 1_700_000_040.0
WEEK = 168 * 3600.0
StoreFactory = Callable[..., RedisCounterStore]


@pytest.fixture
async def stores(redis_url: str) -> AsyncIterator[StoreFactory]:
    """Gateways on the shared Redis, all under one fresh prefix."""
    prefix = f"fgtest:{uuid.uuid4().hex}:"
    made: list[RedisCounterStore] = []

    def make(**options: object) -> RedisCounterStore:
        options.setdefault("prefix", prefix)
        options.setdefault("timeout", 5.0)
        store = RedisCounterStore(redis_url, **options)  # type: ignore[arg-type]
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()
    await delete_prefix(redis_url, prefix)


async def test_two_gateways_share_one_reservation(stores: StoreFactory) -> None:
    east, west = stores(), stores()
    gateways = [east, west] * 50
    claims = await asyncio.gather(*(g.claim("b300", "etabA", 6, T0) for g in gateways))
    assert sum(c.within_share for c in claims) == 6  # 6 between them, not 6 each
    holder, claim = next((g, c) for g, c in zip(gateways, claims, strict=True) if c.within_share)
    await holder.release(claim)
    other = west if holder is east else east
    assert (await other.claim("b300", "etabA", 6, T0)).within_share


async def test_every_gateway_reads_the_slots_of_all(stores: StoreFactory) -> None:
    east, west = stores(), stores()
    for gateway, org in [(east, "etabA"), (west, "etabA"), (west, "etabB")]:
        assert (await gateway.claim("b300", org, 4, T0)).within_share
    expected = {"etabA": 2, "etabB": 1}
    assert await east.in_flight("b300", T0) == expected
    assert await west.in_flight("b300", T0) == expected


async def test_two_gateways_rank_on_one_usage(stores: StoreFactory) -> None:
    east, west = stores(), stores()
    await east.charge("b300", "etabA", 3.0, T0, WEEK)
    await west.charge("b300", "etabA", 1.0, T0, WEEK)
    await west.charge("b300", "etabB", 2.0, T0, WEEK)
    expected = {"etabA": 4.0, "etabB": 2.0}
    assert await east.usage("b300", T0, WEEK) == pytest.approx(expected, rel=1e-12)
    assert await west.usage("b300", T0, WEEK) == pytest.approx(expected, rel=1e-12)


async def test_a_dead_gateways_claims_expire_after_the_lease_ttl(stores: StoreFactory) -> None:
    dead, live = stores(lease_ttl=30.0), stores(lease_ttl=30.0)
    assert (await dead.claim("p", "org", 1, T0)).within_share
    await dead.aclose()  # gone without releasing
    assert await live.in_flight("p", T0 + 29) == {"org": 1}
    assert not (await live.claim("p", "org", 1, T0 + 29)).within_share
    assert await live.in_flight("p", T0 + 31) == {}  # expired: no longer counted
    assert (await live.claim("p", "org", 1, T0 + 31)).within_share


async def test_a_live_gateway_keeps_its_claims_by_refreshing(stores: StoreFactory) -> None:
    holder, other = stores(lease_ttl=30.0), stores(lease_ttl=30.0)
    held = await holder.claim("p", "org", 1, T0)
    assert held.within_share
    await holder.refresh(T0 + 20)  # what the LeaseRefresher does every lease_ttl / 3
    assert await other.in_flight("p", T0 + 45) == {"org": 1}
    assert not (await other.claim("p", "org", 1, T0 + 45)).within_share
    await holder.release(held)
    await holder.refresh(T0 + 47)  # a released claim is not brought back
    assert (await other.claim("p", "org", 1, T0 + 47)).within_share


@pytest.fixture
def private_redis() -> Iterator[str]:
    """A redis-server of this test's own (it gets paused: never pause the shared one)."""
    with private_redis_server() as server:
        yield server.url


async def test_claimers_cancelled_while_waiting_give_their_slots_back(private_redis: str) -> None:
    gateway = RedisCounterStore(private_redis, timeout=10.0)
    observer = RedisCounterStore(private_redis, timeout=10.0)
    admin = Redis.from_url(private_redis)
    try:
        await gateway.release(await gateway.claim("p", "org", 5, T0))  # script loaded
        await admin.client_pause(1500, all=False)  # writes (scripts) wait
        tasks = [asyncio.create_task(gateway.claim("p", "org", 5, T0)) for _ in range(8)]
        # the eight go out in one write on the store's one connection: once the first
        # waits on the server, the other seven wait behind it
        await scripts_waiting(admin, 1)
        for task in tasks:
            task.cancel()  # each caller is gone while its script is still to run
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results)
        await gateway.aclose()  # waits for the scripts, then for the slots given back
        fresh = [await observer.claim("p", "org", 5, T0) for _ in range(6)]
        assert [c.within_share for c in fresh] == [True] * 5 + [False]
    finally:
        await admin.aclose()
        await observer.aclose()
        await gateway.aclose()


async def test_every_key_expires(stores: StoreFactory, redis_url: str) -> None:
    store = stores(lease_ttl=30.0)
    await store.claim("b300", "etabA", 2, T0)
    await store.charge("b300", "etabA", 1.0, T0, 3600.0)
    client = Redis.from_url(redis_url)
    try:
        ttls = {
            k.decode().removeprefix(store.prefix): await client.pttl(k)
            async for k in client.scan_iter(match=f"{store.prefix}*")
        }
    finally:
        await client.aclose()
    assert set(ttls) == {
        "fairshare:inflight:b300:etabA",
        "fairshare:orgs:b300",
        "fairshare:usage:b300",
    }
    assert 0 < ttls["fairshare:inflight:b300:etabA"] <= 60_000
    assert 0 < ttls["fairshare:orgs:b300"] <= 60_000
    assert 20 * 3600_000 - 60_000 < ttls["fairshare:usage:b300"] <= 20 * 3600_000


async def test_a_refresh_keeps_the_pool_readable_as_long_as_the_slots(
    stores: StoreFactory, redis_url: str
) -> None:
    holder, other = stores(lease_ttl=30.0), stores(lease_ttl=30.0)
    assert (await holder.claim("p", "org", 1, T0)).within_share
    client = Redis.from_url(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{holder.prefix}*")]
        assert len(keys) == 2  # the slots and the pool's index of organisations
        for key in keys:  # as if the claim were long ago: only refreshes keep them now
            await client.pexpire(key, 1000)
        await holder.refresh(T0 + 20)
        assert [await client.pttl(key) > 30_000 for key in keys] == [True, True]
    finally:
        await client.aclose()
    assert await other.in_flight("p", T0 + 45) == {"org": 1}


async def test_redis_down_fails_fast_and_opens_the_breaker() -> None:
    store = RedisCounterStore(
        f"redis://127.0.0.1:{free_port()}/0", timeout=0.5, breaker=Breaker.fixed(cooldown=30.0)
    )
    try:
        for _ in range(3):
            with pytest.raises(StateUnavailable, match="Redis call failed"):
                await asyncio.wait_for(store.claim("p", "org", 2, T0), 10)
        assert store.breaker.state == "open"
        started = time.monotonic()
        for _ in range(50):
            with pytest.raises(StateUnavailable, match="breaker open"):
                await store.claim("p", "org", 2, T0)
            with pytest.raises(StateUnavailable, match="breaker open"):
                await store.usage("p", T0, WEEK)
            with pytest.raises(StateUnavailable, match="breaker open"):
                await store.in_flight("p", T0)
            with pytest.raises(StateUnavailable, match="breaker open"):
                await store.charge("p", "org", 1.0, T0, WEEK)
        assert time.monotonic() - started < 5  # no network at all while open
        # a borrowing claim never needs the back end, and releasing it neither
        borrowing = await store.claim("p", "guest", 0, T0)
        await store.release(borrowing)
    finally:
        await store.aclose()
