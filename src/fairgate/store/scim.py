"""SCIM's own tables: the pushed resources, the users it provisions, the roles it granted.

Functions run in the caller's transaction. ``scim_resources`` keeps what the
identity provider wrote (``fairgate.scim.storage`` turns rows into SCIM models);
``scim_users`` and ``scim_grants`` are what the reconciliation
(``fairgate.scim.reconcile``) derived, so it can take away exactly what it gave.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.tables import scim_grants, scim_resources, scim_users, users

__all__ = [
    "Grant",
    "ResourceRow",
    "add_grant",
    "adopt",
    "count_resources",
    "delete_resource",
    "drop_grant",
    "get_resource",
    "grants",
    "insert_resource",
    "list_resources",
    "managed_users",
    "update_resource",
]


@dataclass(frozen=True, slots=True)
class ResourceRow:
    """One stored SCIM resource: ``kind`` User or Group, ``body`` its attributes as JSON."""

    id: str
    kind: str
    name: str
    active: bool
    body: Mapping[str, Any]
    version: int
    created_at: datetime
    modified_at: datetime


Grant = tuple[int, str, int]
"""``(user id, role, team id)``: one role binding SCIM granted."""

_COLUMNS = (
    scim_resources.c.id,
    scim_resources.c.kind,
    scim_resources.c.name,
    scim_resources.c.active,
    scim_resources.c.body,
    scim_resources.c.version,
    scim_resources.c.created_at,
    scim_resources.c.modified_at,
)


def _row(row: Any) -> ResourceRow:
    return ResourceRow(**row._mapping)


async def get_resource(conn: AsyncConnection, kind: str, resource_id: str) -> ResourceRow | None:
    query = select(*_COLUMNS).where(
        scim_resources.c.kind == kind, scim_resources.c.id == resource_id
    )
    row = (await conn.execute(query)).one_or_none()
    return None if row is None else _row(row)


async def list_resources(
    conn: AsyncConnection,
    kinds: Collection[str],
    *,
    name_key: str | None = None,
    offset: int = 0,
    limit: int | None = None,
) -> list[ResourceRow]:
    """Resources of ``kinds`` by id; only the one whose ``name_key`` is given (the unique
    index), and the ``offset``/``limit`` slice of that order, when asked."""
    query = select(*_COLUMNS).where(scim_resources.c.kind.in_(list(kinds)))
    if name_key is not None:
        query = query.where(scim_resources.c.name_key == name_key)
    query = query.order_by(scim_resources.c.id)
    if offset:
        query = query.offset(offset)
    if limit is not None:
        query = query.limit(limit)
    return [_row(row) for row in await conn.execute(query)]


async def count_resources(conn: AsyncConnection, kinds: Collection[str]) -> int:
    query = select(func.count()).where(scim_resources.c.kind.in_(list(kinds)))
    count: int = (await conn.execute(query)).scalar_one()
    return count


async def insert_resource(
    conn: AsyncConnection,
    *,
    resource_id: str,
    kind: str,
    name: str,
    active: bool,
    body: Mapping[str, Any],
    now: datetime,
) -> None:
    """Store a new resource at version 1 (StoreConflict for a name its kind holds)."""
    await conn.execute(
        insert(scim_resources).values(
            id=resource_id,
            kind=kind,
            name=name,
            name_key=name.casefold(),
            active=active,
            body=dict(body),
            version=1,
            created_at=now,
            modified_at=now,
        )
    )


async def update_resource(
    conn: AsyncConnection,
    *,
    resource_id: str,
    kind: str,
    name: str,
    active: bool,
    body: Mapping[str, Any],
    version: int,
    now: datetime,
) -> bool:
    """Replace a resource still at ``version`` and step its version; False when it is not
    (gone, or written meanwhile)."""
    result = await conn.execute(
        update(scim_resources)
        .where(
            scim_resources.c.kind == kind,
            scim_resources.c.id == resource_id,
            scim_resources.c.version == version,
        )
        .values(
            name=name,
            name_key=name.casefold(),
            active=active,
            body=dict(body),
            version=version + 1,
            modified_at=now,
        )
    )
    return bool(result.rowcount)


async def delete_resource(
    conn: AsyncConnection, kind: str, resource_id: str, version: int | None = None
) -> bool:
    """Delete a resource (still at ``version`` when given); False when none matched."""
    query = delete(scim_resources).where(
        scim_resources.c.kind == kind, scim_resources.c.id == resource_id
    )
    if version is not None:
        query = query.where(scim_resources.c.version == version)
    return bool((await conn.execute(query)).rowcount)


async def managed_users(conn: AsyncConnection) -> dict[int, tuple[str, bool]]:
    """The users SCIM provisions: id -> (name, enabled now)."""
    query = select(users.c.id, users.c.name, users.c.disabled_at).join_from(
        scim_users, users, scim_users.c.user_id == users.c.id
    )
    return {r.id: (r.name, r.disabled_at is None) for r in await conn.execute(query)}


async def adopt(conn: AsyncConnection, user_id: int, now: datetime) -> None:
    """Record that SCIM provisions this user from now on."""
    await conn.execute(insert(scim_users).values(user_id=user_id, created_at=now))


async def grants(conn: AsyncConnection) -> set[Grant]:
    query = select(scim_grants.c.user_id, scim_grants.c.role, scim_grants.c.team_id)
    return {(r.user_id, r.role, r.team_id) for r in await conn.execute(query)}


async def add_grant(conn: AsyncConnection, grant: Grant, now: datetime) -> None:
    user_id, role, team_id = grant
    await conn.execute(
        insert(scim_grants).values(user_id=user_id, role=role, team_id=team_id, created_at=now)
    )


async def drop_grant(conn: AsyncConnection, grant: Grant) -> None:
    user_id, role, team_id = grant
    await conn.execute(
        delete(scim_grants).where(
            and_(
                scim_grants.c.user_id == user_id,
                scim_grants.c.role == role,
                scim_grants.c.team_id == team_id,
            )
        )
    )
