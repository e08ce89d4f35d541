"""The lease refresher a gateway runs beside a shared back end."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import pytest
from redis.asyncio import Redis

from fairgate.limits import InFlightCharge, LeaseRefresher
from fairgate.state import MemoryCounterStore, RedisCounterStore

T0 = 1_700_000_040.0


class DrivenClock:
    def __init__(self, wall: float) -> None:
        self.now = wall

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return time.monotonic()


async def test_a_store_whose_leases_never_expire_needs_no_refresher() -> None:
    refresher = LeaseRefresher(MemoryCounterStore(), DrivenClock(T0))
    await asyncio.wait_for(refresher.run(), 5)  # returns at once
    assert refresher.refreshes == 0


@pytest.mark.redis
async def test_the_refresher_keeps_a_live_gateways_slot(redis_url: str) -> None:
    prefix = f"fgtest:{uuid.uuid4().hex}:"
    # a short lease so the refresher ticks fast; time in the counters is driven
    holder = RedisCounterStore(redis_url, prefix=prefix, timeout=5.0, lease_ttl=0.3)
    other = RedisCounterStore(redis_url, prefix=prefix, timeout=5.0, lease_ttl=0.3)
    slot = InFlightCharge("inflight:k", 1)
    assert (await holder.acquire([slot], T0)).admitted
    clock = DrivenClock(T0 + 100)  # long after the lease would have expired
    refresher = LeaseRefresher(holder, clock)
    task = asyncio.create_task(refresher.run())
    try:
        deadline = time.monotonic() + 10
        while refresher.refreshes < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert refresher.refreshes >= 1
        assert not (await other.acquire([slot], T0 + 100.2)).admitted
        assert (await other.acquire([slot], T0 + 100.4)).admitted
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await holder.aclose()
        await other.aclose()
        client = Redis.from_url(redis_url)
        await client.delete(f"{prefix}inflight:k")
        await client.aclose()
