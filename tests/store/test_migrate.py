"""Migrations: shipped in the package, create the tables the code describes, run twice safely."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from fairgate.store import Store, current_revision, head_revision, upgrade
from fairgate.store.tables import metadata


def _diff(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


async def test_the_migrated_schema_is_the_schema_of_the_code(store: Store) -> None:
    async with store.read() as conn:
        assert await conn.run_sync(_diff) == []


async def test_the_store_is_at_the_newest_revision_and_upgrading_again_changes_nothing(
    store: Store,
) -> None:
    assert await current_revision(store) == head_revision()
    assert await upgrade(store) == head_revision()
    assert await current_revision(store) == head_revision()


async def test_a_new_sqlite_file_is_created_and_migrated(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/new.db")
    await store.connect()
    try:
        assert await current_revision(store) is None
        await upgrade(store)
        assert await current_revision(store) == head_revision()
    finally:
        await store.close()


def test_the_migration_scripts_ship_inside_the_package() -> None:
    scripts = resources.files("fairgate.store") / "migrations"
    names = {entry.name for entry in (scripts / "versions").iterdir()}
    assert any(name.endswith(".py") and name[:4].isdigit() for name in names)
    assert (scripts / "env.py").is_file()
    assert (scripts / "script.py.mako").is_file()
