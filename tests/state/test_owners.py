"""Response owners: the same contract on memory and Redis, and the memory bound."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from fairgate.limits import StateUnavailable
from fairgate.state import (
    Breaker,
    MemoryResponseOwners,
    RedisCounterStore,
    RedisResponseOwners,
)

Owners = MemoryResponseOwners | RedisResponseOwners


@pytest.fixture(params=["memory", "redis"])
async def owners(request: pytest.FixtureRequest) -> AsyncIterator[Owners]:
    if request.param == "memory":
        yield MemoryResponseOwners(60.0)
        return
    url = request.getfixturevalue("redis_url")
    store = RedisCounterStore(url, prefix=f"fgtest:{uuid.uuid4().hex}:", timeout=5.0)
    try:
        yield RedisResponseOwners(store, 60.0)
    finally:
        await store.aclose()


async def test_an_owner_is_read_back_and_an_unknown_id_has_none(owners: Owners) -> None:
    await owners.remember("resp_1", "a")
    await owners.remember("resp_2", "b")
    assert await owners.owner_of("resp_1") == "a"
    assert await owners.owner_of("resp_2") == "b"
    assert await owners.owner_of("resp_3") is None


async def test_the_memory_entries_expire_and_stay_bounded() -> None:
    now = [0.0]
    owners = MemoryResponseOwners(10.0, clock=lambda: now[0], max_entries=3)
    await owners.remember("old", "a")
    now[0] = 11.0
    assert await owners.owner_of("old") is None
    for name in ("r1", "r2", "r3", "r4"):
        await owners.remember(name, "a")
    assert await owners.owner_of("r1") is None  # the oldest went: it can no longer be continued
    assert [await owners.owner_of(n) for n in ("r2", "r3", "r4")] == ["a", "a", "a"]


async def test_redis_entries_expire(redis_url: str) -> None:
    store = RedisCounterStore(redis_url, prefix=f"fgtest:{uuid.uuid4().hex}:", timeout=5.0)
    try:
        owners = RedisResponseOwners(store, 60.0)
        await owners.remember("resp_1", "a")
        ttl = await store.client.pttl(f"{store.prefix}response:resp_1")
        assert 0 < ttl <= 60_000
    finally:
        await store.aclose()


async def test_redis_down_is_state_unavailable() -> None:
    store = RedisCounterStore("redis://127.0.0.1:1/0", timeout=0.2, breaker=Breaker.fixed())
    try:
        with pytest.raises(StateUnavailable):
            await RedisResponseOwners(store, 60.0).owner_of("resp_1")
    finally:
        await store.aclose()
