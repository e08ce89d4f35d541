"""The store on both back ends, for the store, tenancy and admin suites.

``store`` is parametrised: every test that takes it runs on a temporary SQLite
file and on PostgreSQL. PostgreSQL gets a database of its own per test session
(``fairgate_test_<random>``), created from ``pg_url`` and dropped at the end;
each test starts from empty tables. Nothing else on the server is touched.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from fairgate.store import Store, upgrade
from fairgate.store.tables import metadata

__all__ = ["FakeClock", "pg_store_url", "sqlite_template", "store", "store_url"]

T0 = 1_750_000_000.0


class FakeClock:
    """Wall time the test sets; monotonic time follows it."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _admin_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _create_database(url: str, name: str) -> None:
    """Create ``name``, whose commits do not wait for the WAL flush: a test database needs no
    durability against a crash of the shared server (8 ms a commit against 2.5 here); what
    the store does, and what each test reads back, is the same."""
    conn = await asyncpg.connect(_admin_dsn(url), timeout=10)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
        await conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    finally:
        await conn.close()


async def _drop_database(url: str, name: str) -> None:
    conn = await asyncpg.connect(_admin_dsn(url), timeout=10)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_store_url(pg_url: str) -> Iterator[str]:
    """A migrated PostgreSQL database of this session's own; dropped afterwards."""
    name = f"fairgate_test_{secrets.token_hex(6)}"
    asyncio.run(_create_database(pg_url, name))
    url = make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    try:
        asyncio.run(upgrade(url))
        yield url
    finally:
        asyncio.run(_drop_database(pg_url, name))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that each test copies (migrating once per session)."""
    path = tmp_path_factory.mktemp("store") / "template.db"
    asyncio.run(upgrade(f"sqlite:///{path}"))
    return path


async def _empty_tables(store: Store) -> None:
    """Every table emptied and every sequence back at 1, as a new database has them.

    DELETE, children first, rather than one TRUNCATE of every table: on tables of a few rows
    TRUNCATE's new files cost about a second a test, DELETE a tenth of that."""
    async with store.write() as conn:
        for table in reversed(metadata.sorted_tables):
            await conn.execute(table.delete())
        sequences = await conn.execute(
            text("SELECT schemaname, sequencename FROM pg_sequences WHERE last_value IS NOT NULL")
        )
        for schema, sequence in sequences:
            await conn.execute(text(f'ALTER SEQUENCE "{schema}"."{sequence}" RESTART'))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a migrated store: a copy of the SQLite template, or the session's PostgreSQL."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "fairgate.db"
        shutil.copyfile(template, path)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("pg_store_url")
    return url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """A connected, migrated, empty store on SQLite or PostgreSQL."""
    store = Store(store_url)
    await store.connect()
    if store.dialect == "postgresql":
        await _empty_tables(store)
    try:
        yield store
    finally:
        await store.close()
