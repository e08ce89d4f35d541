"""Usage records older than ``accounting.retention`` are deleted, a small batch at a time.

    pruner = Pruner(store, retention=90 * 86400, clock=clock)
    removed = await pruner.prune()       # until nothing older is left
    await pruner.run(every=3600)         # a Gateway task; never returns

Pruning runs in the background, never on a request's path, in transactions of
``batch`` records with a pause between them, so that a first run over years of
records neither holds a long lock nor starves the recorder's writes. Several
gateways pruning one store at once is harmless: each deletes what is still
there. Spend reports over a period older than the retention show less, and a
budget's period longer than the retention would restore less at start-up: the
configuration refuses nothing, docs/accounting.md says so.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from fairgate.core.clock import Clock
from fairgate.store import Store, usage_records

__all__ = ["Pruner"]

log = logging.getLogger("fairgate.accounting")


class Pruner:
    """Deletes the records that ended more than ``retention`` seconds ago."""

    def __init__(
        self,
        store: Store,
        *,
        retention: float,
        clock: Clock,
        batch: int = 1000,
        pause: float = 0.05,
    ) -> None:
        if retention <= 0 or batch < 1:
            raise ValueError("retention must be > 0 and batch >= 1")
        self._store = store
        self._retention = retention
        self._clock = clock
        self._batch = batch
        self._pause = pause

    async def prune(self) -> int:
        """Delete every record older than the retention, batch by batch; how many went.
        Raises ``StoreUnavailable`` (what went before stays gone)."""
        before = datetime.fromtimestamp(self._clock.wall() - self._retention, UTC)
        removed = 0
        while True:
            async with self._store.write() as conn:
                count = await usage_records.delete_before(conn, before, self._batch)
            removed += count
            if count < self._batch:
                return removed
            await asyncio.sleep(self._pause)

    async def run(self, every: float) -> None:
        """Prune now, then every ``every`` seconds; a store that fails is tried next time."""
        while True:
            try:
                removed = await self.prune()
            except Exception as exc:
                log.warning("accounting: usage records not pruned (%s)", type(exc).__name__)
            else:
                if removed:
                    log.info("accounting: %d usage records past the retention pruned", removed)
            await asyncio.sleep(every)
