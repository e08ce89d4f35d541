"""The change watcher: every gateway process forgets withdrawn keys within a poll interval.

    watcher = ChangeWatcher(StoreChangeFeed(store), cache, clock, interval=0.5,
                            wakers=[PostgresChangeListener(store), RedisNotices(…)])
    await watcher.start()            # the feed's newest id: older changes are not ours
    task = asyncio.create_task(watcher.run())

The store keeps a feed of access changes (``fairgate.store.access_changes``),
written in the transaction of each change, whoever made it. The watcher reads
the rows it has not seen every ``interval`` seconds, and at once when a waker
calls (PostgreSQL's NOTIFY at commit, a Redis message): for each row the key
cache drops what it holds for the subject (``KeyCache.drop``), so the next
request with one of those keys asks the store; then ``on_changes`` is handed the
rows read (the proxy checks its requests in flight of those subjects again and cuts
the refused: ``fairgate.proxy.in_flight``).

Rows are read by id. On PostgreSQL ids are taken at insert and committed in
any order, so a row can appear after one with a higher id: the watcher keeps
every id above the highest one below which it has seen everything
(``_Cursor``), and gives an id up only ``GAP_WAIT`` seconds after noticing it
missing (a rolled-back change leaves a hole forever). The key cache TTL stays
the backstop for a store the watcher cannot read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from fairgate.auth.cache import KeyCache
from fairgate.core.clock import Clock
from fairgate.core.errors import StoreUnavailable

__all__ = ["GAP_WAIT", "Change", "ChangeFeed", "ChangeWatcher", "Waker"]

log = logging.getLogger("fairgate.auth")

GAP_WAIT = 30.0
"""Seconds a missing feed id is waited for (a transaction still open) before it is given up."""

_PAGE = 1000
_HOLES = 10_000  # holes tracked at most; an id further below the newest is given up at once


class Change(Protocol):
    """One row of the feed: ``kind`` (key | team | project | org) and its ``subject``."""

    @property
    def id(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def subject(self) -> str: ...


class ChangeFeed(Protocol):
    """The feed in the store; both methods raise ``StoreUnavailable`` when it cannot answer."""

    async def latest(self) -> int:
        """The newest id (0 when empty)."""
        ...

    async def since(self, after: int, limit: int) -> Sequence[Change]:
        """Rows with an id above ``after``, oldest first, at most ``limit``."""
        ...


class Waker(Protocol):
    """Something that knows early that the feed has a new row (LISTEN, a pub/sub channel)."""

    async def run(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` whenever the feed may have grown; runs until cancelled."""
        ...


class _Cursor:
    """Which feed ids were applied: all up to ``floor``, and ``seen`` above it."""

    def __init__(self, floor: int) -> None:
        self.floor = floor
        self.seen: set[int] = set()
        self._missing: dict[int, float] = {}  # id → when first noticed missing

    def fresh(self, changes: Sequence[Change]) -> list[Change]:
        """The changes not applied yet, now counted as applied."""
        new = [c for c in changes if c.id > self.floor and c.id not in self.seen]
        self.seen.update(c.id for c in new)
        return new

    def advance(self, now: float) -> None:
        """Raise ``floor`` over every id seen or given up, and note the new holes."""
        if not self.seen:
            return
        top = max(self.seen)
        lowest = max(self.floor + 1, top - _HOLES)
        if lowest > self.floor + 1:  # too far below the newest to track: given up
            self.seen = {i for i in self.seen if i >= lowest}
            self.floor = lowest - 1
        for hole in range(lowest, top):
            if hole not in self.seen:
                self._missing.setdefault(hole, now)
        while self.floor < top:
            nxt = self.floor + 1
            if nxt in self.seen:
                self.seen.discard(nxt)
            elif nxt in self._missing:
                if now - self._missing[nxt] < GAP_WAIT:
                    break
                del self._missing[nxt]
            self.floor = nxt


class ChangeWatcher:
    """Reads the access-change feed and drops what the key cache holds for each change.

    ``interval`` (seconds, > 0) is the longest wait between reads; a waker's
    call reads at once. A store that does not answer is logged and asked again
    at the next interval (cached keys then live until their TTL at most).
    ``on_applied(n)`` and ``on_failed()`` report each read (for metrics);
    ``on_changes(rows)`` gets the rows a read applied, after the cache dropped them.
    """

    def __init__(
        self,
        feed: ChangeFeed,
        cache: KeyCache,
        clock: Clock,
        *,
        interval: float,
        wakers: Sequence[Waker] = (),
        on_applied: Callable[[int], None] = lambda _n: None,
        on_failed: Callable[[], None] = lambda: None,
        on_changes: Callable[[Sequence[Change]], None] = lambda _rows: None,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"the change poll interval must be positive, not {interval}")
        self._feed = feed
        self._cache = cache
        self._clock = clock
        self._interval = interval
        self._wakers = tuple(wakers)
        self._on_applied = on_applied
        self._on_failed = on_failed
        self._on_changes = on_changes
        self._cursor: _Cursor | None = None
        self._woken = asyncio.Event()

    async def start(self) -> None:
        """Take the feed's newest id as the starting point (raises ``StoreUnavailable``)."""
        self._cursor = _Cursor(await self._feed.latest())

    def wake(self) -> None:
        """Read the feed now (called by wakers; safe from any callback on the loop)."""
        self._woken.set()

    async def run(self) -> None:
        """Read the feed every ``interval`` and at each wake-up, until cancelled."""
        tasks = [asyncio.create_task(w.run(self.wake)) for w in self._wakers]
        try:
            while True:
                self._woken.clear()
                await self.read()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), self._interval)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def read(self) -> int:
        """Apply every change not applied yet; how many were applied (0 when the store failed)."""
        if self._cursor is None:
            try:
                await self.start()
            except StoreUnavailable as exc:
                self._failed(exc)
                return 0
        cursor = self._cursor
        assert cursor is not None
        applied: list[Change] = []
        after = cursor.floor
        try:
            while True:
                page = await self._feed.since(after, _PAGE)
                for change in cursor.fresh(page):
                    self._cache.drop(change.kind, change.subject)
                    applied.append(change)
                if len(page) < _PAGE:
                    break
                after = page[-1].id
        except StoreUnavailable as exc:
            self._failed(exc)
        cursor.advance(self._clock.monotonic())
        if applied:
            self._on_applied(len(applied))
            self._on_changes(applied)
        return len(applied)

    def _failed(self, exc: StoreUnavailable) -> None:
        log.warning("access changes: the store did not answer: %s", exc)
        self._on_failed()
