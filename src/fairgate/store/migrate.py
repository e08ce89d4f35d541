"""Schema migrations (Alembic), run from code: ``await upgrade(store)``.

The migration scripts ship inside the package (``fairgate/store/migrations``),
so an installed gateway can migrate its own store with no ``alembic.ini``.
On PostgreSQL the upgrade holds a transaction-level advisory lock, so several
gateway replicas starting together migrate once and the others wait, then find
nothing to do. On SQLite the write transaction's lock does the same.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from fairgate.store.database import Store

__all__ = ["current_revision", "head_revision", "upgrade"]

_SCRIPTS = Path(__file__).resolve().parent / "migrations"


def _alembic_config() -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(_SCRIPTS).replace("%", "%%"))
    return config


def head_revision() -> str:
    """The newest revision this version of fairgate knows."""
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


async def upgrade(store: Store | str) -> str:
    """Bring the store's schema to the newest revision; return that revision.

    ``store`` is a connected :class:`Store` or a store URL (connected for the
    upgrade, then closed). Raises StoreUnavailable when the database does not answer.
    """
    if isinstance(store, str):
        own = Store(store)
        await own.connect()
        try:
            return await upgrade(own)
        finally:
            await own.close()
    async with store.write(exclusive=True) as conn:
        await conn.run_sync(_upgrade)
    return head_revision()


async def current_revision(store: Store) -> str | None:
    """The store's schema revision, or None for an empty database."""
    async with store.read() as conn:
        return await conn.run_sync(_current)


def _upgrade(connection: Connection) -> None:
    config = _alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()
