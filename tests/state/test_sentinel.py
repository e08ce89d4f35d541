"""Redis through Sentinel: the counters follow the primary the Sentinel names, across a
failover, without a new store (real redis-server ×2 and redis-sentinel, ``redis_sentinel``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairgate.limits import StateUnavailable, WindowCharge
from fairgate.state import Breaker, RedisCounterStore, RedisNotices
from fairgate.state.target import RedisTarget
from redis_sentinel import SERVICE, SentinelGroup, sentinel_group

pytestmark = [pytest.mark.redis, pytest.mark.slow]

T0 = 1_700_000_040.0
RPM = WindowCharge("rpm:k", 1, 1000)
KEY = "fgsentinel:rpm:k"


@pytest.fixture
def group(tmp_path: Path) -> Iterator[SentinelGroup]:
    with sentinel_group(tmp_path) as started:
        yield started


def target(group: SentinelGroup, *, dead_first: bool = False) -> RedisTarget:
    sentinels = [("127.0.0.1", group.sentinel_port)]
    if dead_first:  # a Sentinel that is down is skipped, the next one answers
        sentinels.insert(0, ("127.0.0.1", 1))
    return RedisTarget("redis://ignored.invalid:1/0", tuple(sentinels), SERVICE)


def counted(group: SentinelGroup, port: int) -> int:
    with group.client(port) as client:
        return sum(int(v) for v in client.hgetall(KEY).values())


async def admit_until_served(store: RedisCounterStore, now: float, deadline: float) -> int:
    """Acquire until Redis answers again; how many calls failed before it did."""
    failed = 0
    while time.monotonic() < deadline:
        try:
            verdict = await store.acquire([RPM], now)
        except StateUnavailable:
            failed += 1
            await asyncio.sleep(0.1)
            continue
        assert verdict.admitted
        return failed
    raise AssertionError("the store never reached the new primary")


async def test_counters_live_on_the_primary_the_sentinel_names(group: SentinelGroup) -> None:
    store = RedisCounterStore(target(group, dead_first=True), prefix="fgsentinel:", timeout=2.0)
    try:
        for _ in range(3):
            assert (await store.acquire([RPM], T0)).admitted
        primary = group.primary_port()
        assert primary is not None
        # the URL's host and port are not used: the Sentinel said where the primary is
        assert counted(group, primary) == 3
    finally:
        await store.aclose()


async def test_a_planned_failover_moves_the_counters_without_a_new_store(
    group: SentinelGroup,
) -> None:
    breaker = Breaker.fixed(threshold=1000, cooldown=0.1)
    store = RedisCounterStore(target(group), prefix="fgsentinel:", timeout=2.0, breaker=breaker)
    try:
        for _ in range(5):
            assert (await store.acquire([RPM], T0)).admitted
        old = group.primary_port()
        assert old is not None
        new = group.failover()
        assert new != old
        group.wait_until_replica(old)
        # the old primary is alive and now a replica: the store's pooled connection to it
        # meets READONLY, is dropped, and the next one goes to the new primary
        await admit_until_served(store, T0 + 1, time.monotonic() + 30)
        assert (await store.acquire([RPM], T0 + 1)).admitted
        assert counted(group, new) == 7  # the 5 replicated before, the 2 after
    finally:
        await store.aclose()


async def test_a_killed_primary_is_replaced_and_the_store_recovers(group: SentinelGroup) -> None:
    store = RedisCounterStore(target(group), prefix="fgsentinel:", timeout=1.0)
    try:
        assert (await store.acquire([RPM], T0)).admitted
        old = group.kill_primary()
        with pytest.raises(StateUnavailable):  # fail closed while there is no primary
            await store.acquire([RPM], T0)
        new = group.wait_for_new_primary(old)
        failed = await admit_until_served(store, T0 + 1, time.monotonic() + 30)
        assert failed <= 30
        assert counted(group, new) >= 2  # the replicated count survived the failover
    finally:
        await store.aclose()


async def test_access_change_wake_ups_follow_the_primary(group: SentinelGroup) -> None:
    notices = RedisNotices(target(group), prefix="fgsentinel:", timeout=1.0, retry=0.1)
    woken = asyncio.Event()
    calls = 0

    def wake() -> None:
        nonlocal calls
        calls += 1
        if calls > 1:  # the first wake-up follows the subscription itself
            woken.set()

    listener = asyncio.create_task(notices.run(wake))
    try:
        async with asyncio.timeout(20):
            while calls == 0:
                await asyncio.sleep(0.05)
            while not woken.is_set():
                await notices.publish()
                await asyncio.sleep(0.1)
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        await notices.aclose()
