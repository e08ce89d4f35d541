"""Organisations: declared in the configuration (with a share) or created through the admin API.

Each function runs in the caller's transaction (``conn``) and takes a ``where``
clause the tenancy layer builds from the actor's scope, so a write outside the
scope matches no row rather than being checked first and done later.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, insert, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store import access_changes
from fairgate.store.tables import keys, orgs, teams

__all__ = ["Org", "by_name", "insert_org", "list_orgs", "set_declared", "set_disabled"]


@dataclass(frozen=True, slots=True)
class Org:
    """An organisation; ``share`` None means it has no reservation and only borrows."""

    id: int
    name: str
    share: float | None
    declared: bool
    created_at: datetime
    disabled_at: datetime | None


_COLUMNS = (
    orgs.c.id,
    orgs.c.name,
    orgs.c.share,
    orgs.c.declared,
    orgs.c.created_at,
    orgs.c.disabled_at,
)


async def insert_org(
    conn: AsyncConnection, *, name: str, share: float | None, declared: bool, now: datetime
) -> Org:
    row = (
        await conn.execute(
            insert(orgs)
            .values(name=name, share=share, declared=declared, created_at=now)
            .returning(*_COLUMNS)
        )
    ).one()
    return Org(**row._mapping)


async def list_orgs(conn: AsyncConnection, where: ColumnElement[bool] | None = None) -> list[Org]:
    query = select(*_COLUMNS).where(where if where is not None else true()).order_by(orgs.c.name)
    return [Org(**row._mapping) for row in await conn.execute(query)]


async def by_name(
    conn: AsyncConnection, name: str, where: ColumnElement[bool] | None = None
) -> Org | None:
    query = select(*_COLUMNS).where(orgs.c.name == name, where if where is not None else true())
    row = (await conn.execute(query)).one_or_none()
    return None if row is None else Org(**row._mapping)


async def set_disabled(
    conn: AsyncConnection,
    name: str,
    disabled_at: datetime | None,
    now: datetime,
    where: ColumnElement[bool] | None = None,
) -> Org | None:
    """Disable (or, with None, enable) an organisation; None when no row in scope changed.

    Its keys are marked changed and the organisation goes into the access-change feed,
    so every key cache drops its keys.
    """
    state = orgs.c.disabled_at.is_(None) if disabled_at else orgs.c.disabled_at.is_not(None)
    row = (
        await conn.execute(
            update(orgs)
            .where(orgs.c.name == name, state, where if where is not None else true())
            .values(disabled_at=disabled_at)
            .returning(*_COLUMNS)
        )
    ).one_or_none()
    if row is None:
        return None
    team_ids = select(teams.c.id).where(teams.c.org_id == row.id)
    await conn.execute(update(keys).where(keys.c.team_id.in_(team_ids)).values(changed_at=now))
    await access_changes.record(conn, "org", row.name, now)
    return Org(**row._mapping)


async def set_declared(
    conn: AsyncConnection, org_id: int, *, share: float | None, declared: bool
) -> None:
    await conn.execute(
        update(orgs).where(orgs.c.id == org_id).values(share=share, declared=declared)
    )
