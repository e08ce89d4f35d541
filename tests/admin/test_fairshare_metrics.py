"""Fair-share gauges (fairgate.observability.fairshare_metrics) over the admin monitor's report."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator

import pytest
from prometheus_client import generate_latest

from fairgate.admin.fairshare import FairShareMonitor
from fairgate.fairshare import FairShare
from fairgate.observability.fairshare_metrics import FairShareMetrics
from fairgate.observability.metrics import GatewayMetrics
from fairgate.state import Breaker, MemoryCounterStore, RedisCounterStore
from redis_keys import delete_prefix
from store.backends import FakeClock

HALF_LIFE = 168 * 3600.0
POLICY = FairShare({"b300": 10, "h100": 4}, {"b300": {"A": 0.6, "B": 0.4}}, half_life=HALF_LIFE)


class Gauges:
    """A registry with the fair-share gauges of one monitor over ``state``."""

    def __init__(self, state: MemoryCounterStore | RedisCounterStore) -> None:
        self.clock = FakeClock()
        self.state = state
        self.local: dict[tuple[str, str], tuple[int, int]] = {}
        self.registry = GatewayMetrics().registry  # next to the gateway's own families
        monitor = FairShareMonitor(POLICY, state, self.clock, lambda: self.local)
        self.metrics = FairShareMetrics(monitor, self.registry)

    def value(self, name: str, pool: str | None = None, org: str | None = None) -> float | None:
        labels = {k: v for k, v in (("pool", pool), ("org", org)) if v is not None}
        return self.registry.get_sample_value(f"fairgate_fairshare_{name}", labels)


async def test_gauges_show_the_report_after_a_refresh() -> None:
    g = Gauges(MemoryCounterStore())
    assert g.value("up") == 0.0 and g.value("reservation", "b300", "A") is None
    for _ in range(7):
        await g.state.claim("b300", "A", 6, g.clock.now)
    await g.state.charge("b300", "A", 90.0, g.clock.now, HALF_LIFE)
    g.local.update({("b300", "A"): (6, 1), ("h100", "C"): (0, 2)})
    assert await g.metrics.refresh()
    assert g.value("up") == 1.0 and g.value("updated_timestamp_seconds") == g.clock.now
    assert g.value("capacity", "b300") == 10.0 and g.value("capacity", "h100") == 4.0
    assert g.value("share", "b300", "A") == 0.6
    assert g.value("reservation", "b300", "A") == 6.0
    assert g.value("within_share_in_flight", "b300", "A") == 6.0
    assert g.value("borrowing_in_flight", "b300", "A") == 1.0
    assert g.value("usage", "b300", "A") == pytest.approx(90.0)
    assert g.value("level", "b300", "A") == pytest.approx(0.6)  # all the usage: S / U = 0.6
    assert g.value("rank", "b300", "A") == 1.0 and g.value("rank", "b300", "B") == 0.0
    assert g.value("level", "b300", "B") == math.inf  # no usage: +Inf is fine for Prometheus
    assert g.value("borrowing_in_flight", "h100", "C") == 2.0
    text = generate_latest(g.registry).decode()
    assert 'fairgate_fairshare_level{org="B",pool="b300"} +Inf' in text
    assert "# HELP fairgate_requests_total" in text  # beside the gateway's own families


async def test_an_organisation_that_left_the_report_leaves_the_gauges() -> None:
    g = Gauges(MemoryCounterStore())
    g.local[("h100", "C")] = (0, 1)
    await g.metrics.refresh()
    assert g.value("borrowing_in_flight", "h100", "C") == 1.0
    g.local.clear()
    await g.metrics.refresh()
    assert g.value("borrowing_in_flight", "h100", "C") is None
    assert g.value("reservation", "b300", "B") == 4.0  # the configured ones stay


async def test_run_keeps_the_gauges_fresh_until_cancelled() -> None:
    g = Gauges(MemoryCounterStore())
    task = asyncio.create_task(g.metrics.run(0.02))
    try:
        await g.state.claim("b300", "B", 4, g.clock.now)
        for _ in range(500):  # bounded: a few refreshes, however loaded the machine is
            if g.value("within_share_in_flight", "b300", "B") == 1.0:
                break
            await asyncio.sleep(0.02)
        assert g.value("within_share_in_flight", "b300", "B") == 1.0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()


@pytest.fixture
async def redis_store(redis_url: str) -> AsyncIterator[RedisCounterStore]:
    prefix = f"fgtest:{uuid.uuid4().hex}:"
    store = RedisCounterStore(
        redis_url, prefix=prefix, timeout=5.0, breaker=Breaker.fixed(threshold=1, cooldown=3600.0)
    )
    try:
        yield store
    finally:
        await store.aclose()
        await delete_prefix(redis_url, prefix)


@pytest.mark.redis
async def test_state_down_keeps_the_last_values_and_drops_up(
    redis_store: RedisCounterStore,
) -> None:
    g = Gauges(redis_store)
    await redis_store.claim("b300", "A", 6, g.clock.now)
    assert await g.metrics.refresh()
    read_at = g.clock.now
    redis_store.breaker.failure()  # open for an hour: every call fails fast
    g.clock.advance(60)
    assert not await g.metrics.refresh()
    assert g.value("up") == 0.0
    assert g.value("within_share_in_flight", "b300", "A") == 1.0
    assert g.value("updated_timestamp_seconds") == read_at
