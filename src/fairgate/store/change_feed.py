"""Reading the access-change feed: by id (both back ends), woken by LISTEN on PostgreSQL.

    feed = StoreChangeFeed(store)                      # fairgate.auth.ChangeFeed
    await feed.since(after=41, limit=1000)             # [AccessChange(42, "key", "01J…"), …]
    listener = PostgresChangeListener(store)           # fairgate.auth.Waker
    await listener.run(wake)                           # wake() at each committed change

The listener holds one connection of its own (outside the pool) on the
``access_changes.CHANNEL`` channel. It calls ``wake`` after each (re)connection
too, since changes committed while it was not listening were never signalled:
the reader then reads the feed by id, so nothing is missed, only later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from fairgate.store.access_changes import CHANNEL, AccessChange, latest_id, since
from fairgate.store.database import Store
from fairgate.store.errors import StoreUnavailable

__all__ = ["PostgresChangeListener", "StoreChangeFeed"]

log = logging.getLogger(__name__)

_DRIVER_ONLY = ("prepared_statement_cache_size", "async_fallback")  # SQLAlchemy's, not asyncpg's


class StoreChangeFeed:
    """Implements ``fairgate.auth.ChangeFeed`` over a connected :class:`Store`.

    Both methods raise ``StoreUnavailable`` when the database does not answer.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    async def latest(self) -> int:
        async with self._store.read() as conn:
            return await latest_id(conn)

    async def since(self, after: int, limit: int) -> Sequence[AccessChange]:
        async with self._store.read() as conn:
            return await since(conn, after, limit=limit)


class PostgresChangeListener:
    """Implements ``fairgate.auth.Waker``: LISTEN on the feed's channel, reconnecting forever.

    ``check_every`` (seconds): how often an idle connection is checked, so a
    connection lost without a word is noticed and replaced; ``retry`` (seconds):
    the pause before connecting again. ``listening`` tells whether a change
    committed now would wake the reader at once.
    """

    def __init__(self, store: Store, *, check_every: float = 5.0, retry: float = 1.0) -> None:
        self._store = store
        self._check_every = check_every
        self._retry = retry
        self.listening = False

    async def run(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` at each notification and after each (re)connection; never returns."""
        while True:
            try:
                await self._listen(wake)
            except (OSError, TimeoutError, asyncpg.PostgresError, StoreUnavailable) as exc:
                log.warning("access changes: LISTEN connection lost, reconnecting: %s", exc)
            finally:
                self.listening = False
            await asyncio.sleep(self._retry)

    async def _listen(self, wake: Callable[[], None]) -> None:
        timeout = self._store.timeout
        conn = await asyncpg.connect(**self._connect_args(), timeout=timeout)
        try:
            await conn.add_listener(CHANNEL, lambda *_: wake())
            self.listening = True
            wake()  # whatever was committed while nobody listened
            while True:
                await asyncio.sleep(self._check_every)
                await conn.fetchval("SELECT 1", timeout=timeout)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), timeout)

    def _connect_args(self) -> dict[str, Any]:
        _, options = self._store.engine.dialect.create_connect_args(self._store.url.url)
        for name in _DRIVER_ONLY:
            options.pop(name, None)
        options.setdefault("server_settings", {"application_name": "fairgate-listen"})
        return dict(options)
