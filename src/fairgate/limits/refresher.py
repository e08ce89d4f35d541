"""Keeps a live gateway's in-flight leases from expiring in a shared back end.

In Redis, every in-flight slot is a lease with an expiry, so a gateway that dies
gives its slots back by itself after ``lease_ttl``. A live gateway must therefore
refresh its leases; the Gateway owns one ``LeaseRefresher`` task for that:

    refresher = LeaseRefresher(store, clock)
    task = asyncio.create_task(refresher.run())   # at start-up
    task.cancel()                                 # at shutdown
"""

from __future__ import annotations

import asyncio
import logging

from fairgate.core.clock import Clock
from fairgate.limits.store import CounterStore, StateUnavailable

__all__ = ["LeaseRefresher"]

log = logging.getLogger(__name__)


class LeaseRefresher:
    """Calls ``store.refresh`` every ``store.refresh_interval`` seconds until cancelled.

    Returns at once for a store whose leases never expire. A failed refresh is
    logged and retried at the next interval: the leases stay valid for a whole
    ``lease_ttl``, several intervals, so one miss loses nothing.
    """

    def __init__(self, store: CounterStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self.refreshes = 0
        self.failures = 0

    async def run(self) -> None:
        interval = self._store.refresh_interval
        if interval is None:
            return
        while True:
            await asyncio.sleep(interval)
            try:
                await self._store.refresh(self._clock.wall())
            except StateUnavailable as exc:
                self.failures += 1
                log.warning("refreshing in-flight leases failed: %s", exc)
            else:
                self.refreshes += 1
