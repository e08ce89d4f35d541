"""The connection to the durable store: one async engine, transactions in, no driver errors out.

    store = Store("sqlite:///var/lib/fairgate/fairgate.db")
    await store.connect()                      # one round trip; StoreUnavailable if none
    async with store.write() as conn:          # one transaction, committed on exit
        await conn.execute(...)
    await store.close()

SQLite runs in WAL mode (readers never wait for the writer) with a busy timeout
(a writer waits for another writer, then gives up with StoreUnavailable), and
write transactions start with ``BEGIN IMMEDIATE`` so two writers queue on the
lock instead of failing half-way. PostgreSQL uses asyncpg with a connect timeout,
a statement timeout and a pre-ping, so a restarted server costs one failed call
at most.

A write may leave a *notice* on its connection (``notice(conn, topic)``); once
its transaction has committed, the callbacks registered with ``on_commit`` for
that topic run (a rolled-back transaction runs none). The access-change feed
uses it to wake other processes through Redis after the change is durable.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from fairgate.store.errors import StoreConflict, StoreUnavailable
from fairgate.store.url import Dialect, StoreURL

__all__ = ["Store", "notice"]

log = logging.getLogger(__name__)

_WRITE = "fairgate_write"
_NOTICES = "fairgate_notices"
_LOCK_ID = 0x66616972  # "fair": any constant shared by every gateway


class Store:
    """The durable store (SQLite or PostgreSQL) behind one async engine.

    ``timeout`` (seconds) bounds connecting, waiting for a pooled connection,
    one statement on PostgreSQL and waiting for SQLite's write lock. Every
    failure to answer raises :class:`StoreUnavailable`; a broken uniqueness or
    reference rule raises :class:`StoreConflict`; the transaction is rolled back
    in both cases and on any exception raised inside the block.
    """

    def __init__(self, url: str, *, base_dir: Path | None = None, timeout: float = 5.0) -> None:
        self.url = StoreURL.parse(url, base_dir=base_dir)
        self._timeout = timeout
        self._engine: AsyncEngine | None = None
        self._on_commit: dict[str, list[Callable[[], Awaitable[None]]]] = {}

    @property
    def timeout(self) -> float:
        return self._timeout

    @property
    def dialect(self) -> Dialect:
        return self.url.dialect

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError("Store.connect() was not called")
        return self._engine

    async def connect(self) -> None:
        """Create the engine and check that the database answers.

        ``ValueError`` when the URL's query holds an option the driver does not take
        (the driver's message names the option, never its value).
        """
        if self._engine is None:
            self._engine = self._create_engine()
        try:
            async with self.read() as conn:
                await conn.execute(text("SELECT 1"))
        except TypeError as exc:
            raise ValueError(f"the store URL holds an option the driver refuses ({exc})") from None

    async def close(self) -> None:
        """Close every pooled connection; the store may be connected again."""
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await engine.dispose()

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A transaction for reading (never blocks on SQLite's write lock)."""
        async with self._transaction(write=False) as conn:
            yield conn

    @asynccontextmanager
    async def write(self, *, exclusive: bool = False) -> AsyncIterator[AsyncConnection]:
        """A transaction for writing, committed when the block ends without an exception.

        ``exclusive``: one such transaction at a time across every process using the
        database (SQLite's write lock; a transaction-level advisory lock on
        PostgreSQL), for start-up steps several gateway processes run together.
        """
        async with self._transaction(write=True) as conn:
            if exclusive and self.dialect == "postgresql":
                await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _LOCK_ID})
            yield conn

    def on_commit(self, topic: str, callback: Callable[[], Awaitable[None]]) -> None:
        """Run ``callback`` after each committed write that left a ``notice`` of ``topic``.

        The callback runs before ``write()``'s block returns to its caller; an
        exception it raises is logged, never raised (the write is committed).
        """
        self._on_commit.setdefault(topic, []).append(callback)

    @asynccontextmanager
    async def _transaction(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        engine = self.engine
        topics: set[str] = set()
        try:
            async with engine.connect() as conn:
                if write:
                    conn = await conn.execution_options(**{_WRITE: True})
                try:
                    async with conn.begin():
                        yield conn
                        topics = conn.info.pop(_NOTICES, set())
                except BaseException:
                    # The dict belongs to the pooled DBAPI connection: never leave a notice
                    # there. A connection the failure invalidated is discarded with its dict,
                    # and reading it would reconnect in the middle of the failure.
                    if not conn.invalidated:
                        conn.info.pop(_NOTICES, None)
                    raise
        except IntegrityError as exc:
            raise StoreConflict(_constraint(exc)) from None
        except (TimeoutError, SQLAlchemyError, OSError) as exc:
            raise StoreUnavailable(_describe(exc)) from exc
        for topic in sorted(topics):
            await self._committed(topic)

    async def _committed(self, topic: str) -> None:
        for callback in self._on_commit.get(topic, ()):
            try:
                await callback()
            except Exception:
                log.exception("store: a callback after a committed %s change failed", topic)

    def _create_engine(self) -> AsyncEngine:
        if self.dialect == "sqlite":
            engine = create_async_engine(
                self.url.url,
                connect_args={"timeout": self._timeout},
                pool_timeout=self._timeout,
            )
            _sqlite_events(engine, busy_ms=int(self._timeout * 1000))
            return engine
        return create_async_engine(
            self.url.url,
            pool_size=5,
            max_overflow=5,
            pool_timeout=self._timeout,
            pool_pre_ping=True,
            connect_args={
                "timeout": self._timeout,
                "command_timeout": self._timeout,
                "server_settings": {"application_name": "fairgate"},
            },
        )


def notice(conn: AsyncConnection, topic: str) -> None:
    """Ask for the ``on_commit`` callbacks of ``topic`` once ``conn``'s transaction commits."""
    conn.info.setdefault(_NOTICES, set()).add(topic)


def _sqlite_events(engine: AsyncEngine, *, busy_ms: int) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver's own implicit BEGIN is turned off: "begin" below decides
        # DEFERRED or IMMEDIATE per transaction.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _describe(exc: BaseException) -> str:
    cause = getattr(exc, "orig", None) or exc
    kind = type(cause).__name__
    detail = str(cause).splitlines()[0][:200] if str(cause) else ""
    if "password" in detail.lower():
        detail = ""
    return f"the store did not answer ({kind}{': ' + detail if detail else ''})"


def _constraint(exc: IntegrityError) -> str:
    detail = str(exc.orig).splitlines()[0][:200] if exc.orig is not None else "constraint"
    return f"the store refused the write ({detail})"
