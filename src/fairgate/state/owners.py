"""Which tenant scope created each Responses API answer the gateway relayed.

vLLM (and any OpenAI-compatible server with a response store) continues a
conversation from ``previous_response_id`` whatever key asks, since its store
is shared by every tenant behind the gateway's one internal key. The gateway
remembers the scope that received each response id and lets only that scope
continue it (``proxy.responses``). Both back ends keep an entry ``ttl`` seconds:

    MemoryResponseOwners(ttl)                      one process; at most 100,000 entries
    RedisResponseOwners(redis, prefix, ttl, ...)   shared: <prefix>response:<id> → owner

Redis failures surface as ``fairgate.limits.StateUnavailable``, like the counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from fairgate.state.redis import RedisCounterStore

__all__ = ["MemoryResponseOwners", "RedisResponseOwners"]

_MAX_ENTRIES = 100_000


class MemoryResponseOwners:
    """Owners in this process's memory, bounded: past ``max_entries`` the expired entries
    go, then the oldest (a forgotten id can no longer be continued: fail closed)."""

    def __init__(
        self,
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = _MAX_ENTRIES,
    ) -> None:
        self._ttl = ttl
        self._clock = clock
        self._max = max_entries
        self._owners: dict[str, tuple[str, float]] = {}

    async def remember(self, response_id: str, owner: str) -> None:
        now = self._clock()
        if len(self._owners) >= self._max:
            self._owners = {k: v for k, v in self._owners.items() if v[1] > now}
            while len(self._owners) >= self._max:
                del self._owners[next(iter(self._owners))]
        self._owners.pop(response_id, None)
        self._owners[response_id] = (owner, now + self._ttl)

    async def owner_of(self, response_id: str) -> str | None:
        entry = self._owners.get(response_id)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            del self._owners[response_id]
            return None
        return entry[0]


class RedisResponseOwners:
    """Owners in Redis (one ``SET … PX`` per answer, one ``GET`` per continuation), on the
    counter store's connection pool, timeout and breaker."""

    def __init__(self, store: RedisCounterStore, ttl: float) -> None:
        self._store = store
        self._ttl_ms = max(1, int(ttl * 1000))

    def _key(self, response_id: str) -> str:
        return f"{self._store.prefix}response:{response_id}"

    def _redis(self) -> Redis:
        return self._store.client

    async def remember(self, response_id: str, owner: str) -> None:
        key = self._key(response_id)
        await self._store.guarded(lambda: self._redis().set(key, owner, px=self._ttl_ms))

    async def owner_of(self, response_id: str) -> str | None:
        key = self._key(response_id)
        value = await self._store.guarded(lambda: self._redis().get(key))
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)
