"""Migrations: shipped in the package, create the tables the code describes, run twice safely."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from sqlalchemy import JSON, Boolean, Integer, String, column, insert, make_url, table, text
from sqlalchemy.engine import Connection

from fairgate.store import (
    Store,
    StoreConflict,
    audit_events,
    current_revision,
    head_revision,
    tables,
    upgrade,
    usage_records,
    users,
)
from fairgate.store.audit_chain import ChainHead, first_break
from fairgate.store.tables import metadata
from fairgate.store.timestamp import UtcDateTime
from store.backends import _create_database, _drop_database


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


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def empty_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A connected store on an empty database of this test's own."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/empty.db"
        name = None
    else:
        pg_url: str = request.getfixturevalue("pg_url")
        name = f"fairgate_test_{secrets.token_hex(6)}"
        await _create_database(pg_url, name)
        url = make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    store = Store(url)
    await store.connect()
    try:
        yield store
    finally:
        await store.close()
        if name is not None:
            await _drop_database(request.getfixturevalue("pg_url"), name)


_TEAMS_0004 = table(
    "teams",
    column("id", Integer),
    column("org_id", Integer),
    column("name", String),
    column("declared", Boolean),
    column("created_at", UtcDateTime),
)


def _upgrade_to(connection: Connection, revision: str) -> None:
    config = AlembicConfig()
    config.set_main_option("script_location", str(resources.files("fairgate.store") / "migrations"))
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


async def test_upgrading_marks_as_from_the_configuration_only_the_teams_its_sync_created(
    empty_store: Store,
) -> None:
    """0005 reads the audit trail: a team whose creation the sync recorded may be moved by the
    configuration; one created by anyone else never is."""
    async with empty_store.write() as conn:
        await conn.run_sync(_upgrade_to, "0004")
        now = datetime.now(UTC)
        await conn.execute(
            insert(tables.orgs).values(id=1, name="A", share=1.0, declared=True, created_at=now)
        )
        for team_id, name, actor in ((1, "synced", "system:config"), (2, "made", "user:olga")):
            await conn.execute(  # the teams table as 0004 left it: no from_config yet
                insert(_TEAMS_0004).values(
                    id=team_id, org_id=1, name=name, declared=True, created_at=now
                )
            )
            await conn.execute(
                insert(tables.audit_events).values(
                    at=now,
                    actor=actor,
                    action="team.created",
                    target=f"team:{name}",
                    org_id=1,
                    team_id=team_id,
                )
            )
    await upgrade(empty_store)
    async with empty_store.read() as conn:
        rows = await conn.execute(text("SELECT name, from_config FROM teams ORDER BY name"))
        assert [(name, bool(flag)) for name, flag in rows] == [("made", False), ("synced", True)]


_EVENTS_0008 = table(
    "audit_events",
    column("id", Integer),
    column("at", UtcDateTime),
    column("actor", String),
    column("action", String),
    column("detail", JSON),
)


async def test_upgrading_chains_the_events_written_before_in_id_order(
    empty_store: Store,
) -> None:
    """0011 seals the existing trail from the genesis hash; the chain then verifies, and an
    event added after the upgrade links to the last old one."""
    async with empty_store.write() as conn:
        await conn.run_sync(_upgrade_to, "0008")
        now = datetime.now(UTC)
        for event_id in (3, 7, 9):  # ids with gaps, as a rolled-back transaction leaves them
            await conn.execute(
                insert(_EVENTS_0008).values(
                    id=event_id, at=now, actor="user:olga", action="key.created", detail={"n": 1}
                )
            )
    await upgrade(empty_store)
    async with empty_store.write() as conn:
        await audit_events.insert_event(conn, at=now, actor="user:olga", action="key.revoked")
    async with empty_store.read() as conn:
        rows = [row async for row in audit_events.chain_rows(conn)]
    assert [(r.id, r.seq) for r in rows[:3]] == [(3, 1), (7, 2), (9, 3)]
    assert [(r.seq, r.action) for r in rows[3:]] == [(4, "key.revoked")]
    assert isinstance(first_break(rows), ChainHead)


async def test_records_written_before_0020_read_as_charged_whole_to_their_model(
    empty_store: Store,
) -> None:
    """0020 adds the parts of a cost charged to other models in a table of its own: a
    record stored before it reads as it did, all of its cost under its own model, and a
    record with parts can be stored beside it."""
    at = datetime(2026, 12, 1, 12, tzinfo=UTC)
    old = {
        "request_id": "old", "at": at, "key_id": "k", "org": "A", "team": "t",
        "model": "cheap", "route": "chat", "status": 200, "outcome": "ok",
        "prompt_tokens": 1, "completion_tokens": 2, "cached_tokens": 0, "cost_micro": 1_030,
        "estimated": True, "total_ms": 5, "attempts": 2,
    }  # fmt: skip
    async with empty_store.write() as conn:
        await conn.run_sync(_upgrade_to, "0019")
        await conn.execute(insert(tables.usage_records).values(**old))
    await upgrade(empty_store)
    new = {**old, "request_id": "new", "other_costs": [("dear", None, 1_000)]}
    async with empty_store.write() as conn:
        assert await usage_records.insert_records(conn, [new]) == 1
    async with empty_store.read() as conn:
        rows = await usage_records.spend(
            conn, start=at, end=at + timedelta(hours=1), group_by=("model",)
        )
    by_model = {r.groups: (r.requests, r.cost_micro) for r in rows}
    assert by_model == {("cheap",): (2, 1_030 + 30), ("dear",): (0, 1_000)}


_USERS_0020 = table(
    "users",
    column("name", String),
    column("created_at", UtcDateTime),
)


async def test_upgrading_keys_names_in_any_case_and_keeps_the_variants_a_store_held(
    empty_store: Store,
) -> None:
    """0021: a store holding ``alice`` and ``Alice`` (the check before an insert let a race
    or SCIM make both) upgrades; the oldest of the two holds the lower-cased name, the
    other none, and no new user of that name in any case can be written, even past the
    check (two creations at once)."""
    async with empty_store.write() as conn:
        await conn.run_sync(_upgrade_to, "0020")
        now = datetime.now(UTC)
        for name in ("alice", "Alice", "bob"):
            await conn.execute(insert(_USERS_0020).values(name=name, created_at=now))
    await upgrade(empty_store)
    async with empty_store.read() as conn:
        rows = await conn.execute(text("SELECT name, name_key FROM users ORDER BY id"))
        assert [tuple(row) for row in rows] == [
            ("alice", "alice"),
            ("Alice", None),
            ("bob", "bob"),
        ]
    for name in ("ALICE", "Bob"):
        with pytest.raises(StoreConflict, match="name_key"):
            async with empty_store.write() as conn:
                await users.insert_user(conn, name=name, org_id=None, now=now)
    async with empty_store.write() as conn:
        await users.insert_user(conn, name="Carol", org_id=None, now=now)
    with pytest.raises(StoreConflict, match="name_key"):
        async with empty_store.write() as conn:
            await users.insert_user(conn, name="carol", org_id=None, now=now)
