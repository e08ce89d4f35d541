"""The ``store`` fixture: every test that takes it runs against memory and against Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from fairgate.limits import CounterStore
from fairgate.state import MemoryCounterStore, RedisCounterStore
from redis_keys import delete_prefix


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[CounterStore]:
    if request.param == "memory":
        yield MemoryCounterStore()
        return
    url: str = request.getfixturevalue("redis_url")
    prefix = f"fgtest:{uuid.uuid4().hex}:"
    # a generous timeout: the machine running the tests is shared
    redis_store = RedisCounterStore(url, prefix=prefix, timeout=5.0)
    try:
        yield redis_store
    finally:
        await redis_store.aclose()
        await delete_prefix(url, prefix)
