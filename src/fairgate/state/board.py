"""Every gateway's own fair-share requests in flight, summed across the fleet.

A borrowing request holds nothing in the state back end (``limits.fairshare_state``):
only the gateway that sent it knows it. So that ``GET /admin/fairshare`` can say
how many requests of an organisation borrow across the fleet, each gateway
publishes its own counts every ``every`` seconds into one Redis hash:

    <prefix>fairshare:gateways   field <gateway id> →
        {"at": <unix s>, "counts": [[pool, org, within share, borrowing], ...]}

``totals`` sums this gateway's live counts and every other gateway's entry
younger than ``stale`` seconds (a gateway that died stops counting after that;
its field is deleted by the next reader). One HSET a second per gateway, one
HGETALL per report.

    board = RedisInFlightBoard(state, local=admit.fairshare_counts)
    task = asyncio.create_task(board.run())
    await board.totals()           # {(pool, org): (within share, borrowing)}

``LocalInFlightBoard`` is the single-process case: the totals are the local counts.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import orjson

from fairgate.limits import StateUnavailable

if TYPE_CHECKING:
    from fairgate.state.redis import RedisCounterStore

__all__ = ["Counts", "LocalInFlightBoard", "RedisInFlightBoard"]

log = logging.getLogger(__name__)

Counts = Mapping[tuple[str, str], tuple[int, int]]
"""Requests in flight per (pool, org): (within share, borrowing)."""


class LocalInFlightBoard:
    """One process: the fleet's counts are this process's."""

    gateways = 1

    def __init__(self, local: Callable[[], Counts]) -> None:
        self._local = local

    async def totals(self) -> dict[tuple[str, str], tuple[int, int]]:
        return dict(self._local())

    async def run(self) -> None:
        return None


class RedisInFlightBoard:
    """Publishes this gateway's counts to Redis and sums every live gateway's.

    ``gateway`` names this process in the hash (host name, pid and a random
    part by default, so two workers of one host never share a field);
    ``clock`` gives Unix seconds (gateways' clocks are assumed within a second
    of each other, as for the lease expiry). ``gateways`` is how many entries
    the last ``totals`` counted, this one included.
    """

    def __init__(
        self,
        state: RedisCounterStore,
        local: Callable[[], Counts],
        *,
        gateway: str | None = None,
        every: float = 1.0,
        stale: float = 3.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 < every < stale:
            raise ValueError("the publishing interval must be positive and below the staleness")
        self._state = state
        self._local = local
        self._key = f"{state.prefix}fairshare:gateways"
        self.gateway = gateway or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
        self._every = every
        self._stale = stale
        self._clock = clock
        self.gateways = 1

    async def publish(self) -> None:
        """Write this gateway's counts now (raises ``StateUnavailable``)."""
        counts = [[p, o, w, b] for (p, o), (w, b) in self._local().items() if w or b]
        entry = orjson.dumps({"at": self._clock(), "counts": counts})
        await self._state.guarded(lambda: self._state.client.hset(self._key, self.gateway, entry))

    async def run(self) -> None:
        """Publish every ``every`` seconds until cancelled; a Redis failure waits for the next."""
        try:
            while True:
                try:
                    await self.publish()
                except StateUnavailable as exc:
                    log.debug("fair-share board: not published: %s", exc)
                await asyncio.sleep(self._every)
        finally:
            await self._withdraw()

    async def totals(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Every live gateway's counts summed, this one's live (raises ``StateUnavailable``)."""
        entries = await self._state.guarded(lambda: self._state.client.hgetall(self._key))
        now = self._clock()
        totals: dict[tuple[str, str], tuple[int, int]] = dict(self._local())
        stale: list[bytes] = []
        seen = 1
        for field, raw in entries.items():
            if field.decode() == self.gateway:
                continue
            try:
                entry = orjson.loads(raw)
                at = float(entry["at"])
                counts = [(str(p), str(o), int(w), int(b)) for p, o, w, b in entry["counts"]]
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                stale.append(field)  # not ours to read: dropped like a dead gateway's
                continue
            if now - at > self._stale:
                stale.append(field)
                continue
            seen += 1
            for pool, org, within, borrowing in counts:
                w, b = totals.get((pool, org), (0, 0))
                totals[(pool, org)] = (w + within, b + borrowing)
        self.gateways = seen
        if stale:
            await self._state.guarded(lambda: self._state.client.hdel(self._key, *stale))
        return totals

    async def _withdraw(self) -> None:
        """Remove this gateway's entry (at shutdown: its requests are gone)."""
        try:
            await self._state.guarded(lambda: self._state.client.hdel(self._key, self.gateway))
        except StateUnavailable as exc:
            log.debug("fair-share board: entry not withdrawn (it goes stale): %s", exc)
