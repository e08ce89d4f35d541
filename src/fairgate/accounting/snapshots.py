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

A save the store refuses (the store down) is kept instead in a local file, ``spare``
(``counters.json`` in the usage-record journal's directory), replaced at each failed
save and removed by the next one that reaches the store. The next start restores it
too and saves it into the store: a graceful stop during a store outage used to lose
every count since the outage began (``tests/e2e/test_snapshot_store_down.py``).

    snapshots = CounterSnapshots(store, memory_state, clock, spare=journal_dir / SPARE)
    await snapshots.restore()         # before serving
    task = asyncio.create_task(snapshots.run(30.0))
    ...
    await snapshots.save()            # at shutdown
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

import orjson

from fairgate.core.clock import Clock
from fairgate.core.errors import StoreUnavailable
from fairgate.limits.snapshot import SavedCounter
from fairgate.state import MemoryCounterStore
from fairgate.store import Store, from_unix
from fairgate.store import counter_snapshots as rows

__all__ = ["SPARE", "CounterSnapshots"]

log = logging.getLogger(__name__)

SPARE = "counters.json"
"""The file, in the journal's directory, holding a snapshot the store did not take."""


class CounterSnapshots:
    """Saves and restores ``state``'s window and period counters through ``store``."""

    def __init__(
        self, store: Store, state: MemoryCounterStore, clock: Clock, *, spare: Path | None = None
    ) -> None:
        self._store = store
        self._state = state
        self._clock = clock
        self._spare = spare

    async def save(self) -> int:
        """Replace the stored snapshot with the live counters; how many were saved.

        Raises ``StoreUnavailable`` (the counters are then kept in the spare file).
        """
        now = self._clock.wall()
        saved = self._state.snapshot(now)
        try:
            async with self._store.write() as conn:
                await rows.replace(conn, saved, from_unix(now))
        except StoreUnavailable:
            self._keep(saved)
            raise
        if self._spare is not None:
            # one left behind is restored again at the next start: it never lowers a counter
            with contextlib.suppress(OSError):
                self._spare.unlink()
        return len(saved)

    async def restore(self) -> int:
        """Raise the live counters to the stored snapshot and to the spare file's; how many
        were restored. A spare file is saved into the store, then removed.

        Raises ``StoreUnavailable``.
        """
        async with self._store.read() as conn:
            saved = await rows.load(conn)
        now = self._clock.wall()
        restored = self._state.restore(saved, now)
        kept = self._kept()
        if kept:
            restored += self._state.restore(kept, now)
            log.warning(
                "rate counters: %d restored from %s (saved there while the store was down)",
                len(kept),
                self._spare,
            )
            try:
                await self.save()
            except StoreUnavailable as exc:  # kept in the file for the next save
                log.error("counter snapshot not saved (store unavailable): %s", exc)
        return restored

    def _keep(self, saved: list[SavedCounter]) -> None:
        """Write ``saved`` to the spare file (whole or not at all); a failure is logged."""
        if self._spare is None:
            return
        data = orjson.dumps([{"key": c.key, "kind": c.kind, "data": c.data} for c in saved])
        making = self._spare.with_name(self._spare.name + ".new")
        try:
            making.write_bytes(data)
            os.replace(making, self._spare)
        except OSError as exc:
            log.error("rate counters not kept in %s either: %s", self._spare, exc)

    def _kept(self) -> list[SavedCounter]:
        """The spare file's counters (none when there is no such file or it is unreadable)."""
        if self._spare is None:
            return []
        try:
            entries = orjson.loads(self._spare.read_bytes())
            return [SavedCounter(e["key"], e["kind"], e["data"]) for e in entries]
        except FileNotFoundError:
            return []
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
            log.error("rate counters in %s not restored (unreadable): %s", self._spare, exc)
            return []

    async def run(self, interval: float) -> None:
        """Save every ``interval`` seconds until cancelled; a failed save is logged and retried."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.save()
            except StoreUnavailable as exc:
                log.error("counter snapshot not saved (store unavailable): %s", exc)
