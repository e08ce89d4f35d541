"""The memory back end's rate counters, saved to the store and restored at start-up.

With ``state.backend: memory`` every per-minute window and per-day (or budget)
period counter lives in the gateway process. Without this, a restart (a crash,
or anything that causes one) would hand every key a fresh minute and a fresh
day. ``CounterSnapshots`` saves every live counter to the store each
``state.snapshot_interval`` (and once more at a graceful stop), and the gateway
restores the last snapshot before it serves. At most one interval of counting
is lost to a crash; in-flight slots are not restored (their requests died with
the process). Restoring never lowers a counter, so it composes with the budget
restore from the usage records (``fairgate.accounting.restore``).

    snapshots = CounterSnapshots(store, memory_state, clock)
    await snapshots.restore()         # before serving
    task = asyncio.create_task(snapshots.run(30.0))
    ...
    await snapshots.save()            # at shutdown
"""

from __future__ import annotations

import asyncio
import logging

from fairgate.core.clock import Clock
from fairgate.core.errors import StoreUnavailable
from fairgate.state import MemoryCounterStore
from fairgate.store import Store, from_unix
from fairgate.store import counter_snapshots as rows

__all__ = ["CounterSnapshots"]

log = logging.getLogger(__name__)


class CounterSnapshots:
    """Saves and restores ``state``'s window and period counters through ``store``."""

    def __init__(self, store: Store, state: MemoryCounterStore, clock: Clock) -> None:
        self._store = store
        self._state = state
        self._clock = clock

    async def save(self) -> int:
        """Replace the stored snapshot with the live counters; how many were saved.

        Raises ``StoreUnavailable``.
        """
        now = self._clock.wall()
        saved = self._state.snapshot(now)
        async with self._store.write() as conn:
            await rows.replace(conn, saved, from_unix(now))
        return len(saved)

    async def restore(self) -> int:
        """Raise the live counters to the stored snapshot; how many were restored.

        Raises ``StoreUnavailable``.
        """
        async with self._store.read() as conn:
            saved = await rows.load(conn)
        return self._state.restore(saved, self._clock.wall())

    async def run(self, interval: float) -> None:
        """Save every ``interval`` seconds until cancelled; a failed save is logged and retried."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.save()
            except StoreUnavailable as exc:
                log.error("counter snapshot not saved (store unavailable): %s", exc)
