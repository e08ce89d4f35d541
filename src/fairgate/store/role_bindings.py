"""Role bindings: a user holds a role on the root, on one organisation or on one team.

Functions run in the caller's transaction and take the scope ``where`` clause
built by the tenancy layer (see ``fairgate.store.orgs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import ColumnElement, and_, delete, insert, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.tables import orgs, role_bindings, teams, users

__all__ = [
    "Binding",
    "ScopeKind",
    "bindings_of",
    "delete_binding",
    "insert_binding",
    "list_bindings",
]

ScopeKind = Literal["root", "org", "team"]


@dataclass(frozen=True, slots=True)
class Binding:
    """``user`` holds ``role`` on a scope: the root (``scope`` None), an org or a team.

    ``org_id`` is the organisation the scope lies in (the team's for a team scope).
    """

    id: int
    user_id: int
    user: str
    role: str
    scope_kind: ScopeKind
    scope_id: int
    scope: str | None
    org_id: int | None
    created_at: datetime
    created_by: str


_scope_org = orgs.alias("scope_org")
_scope_team = teams.alias("scope_team")
_team_org = orgs.alias("team_org")

_QUERY = (
    select(
        role_bindings.c.id,
        role_bindings.c.user_id,
        users.c.name.label("user"),
        role_bindings.c.role,
        role_bindings.c.scope_kind,
        role_bindings.c.scope_id,
        _scope_org.c.name.label("org_name"),
        _scope_team.c.name.label("team_name"),
        _scope_team.c.org_id.label("team_org_id"),
        role_bindings.c.created_at,
        role_bindings.c.created_by,
    )
    .join_from(role_bindings, users, role_bindings.c.user_id == users.c.id)
    .outerjoin(
        _scope_org,
        and_(role_bindings.c.scope_kind == "org", role_bindings.c.scope_id == _scope_org.c.id),
    )
    .outerjoin(
        _scope_team,
        and_(role_bindings.c.scope_kind == "team", role_bindings.c.scope_id == _scope_team.c.id),
    )
)


def _binding(row: object) -> Binding:
    r = row._mapping  # type: ignore[attr-defined]
    kind = r["scope_kind"]
    return Binding(
        id=r["id"],
        user_id=r["user_id"],
        user=r["user"],
        role=r["role"],
        scope_kind=kind,
        scope_id=r["scope_id"],
        scope=r["org_name"] if kind == "org" else r["team_name"] if kind == "team" else None,
        org_id=r["scope_id"] if kind == "org" else r["team_org_id"] if kind == "team" else None,
        created_at=r["created_at"],
        created_by=r["created_by"],
    )


async def insert_binding(
    conn: AsyncConnection,
    *,
    user_id: int,
    role: str,
    scope_kind: ScopeKind,
    scope_id: int,
    created_by: str,
    now: datetime,
) -> Binding:
    binding_id = (
        await conn.execute(
            insert(role_bindings)
            .values(
                user_id=user_id,
                role=role,
                scope_kind=scope_kind,
                scope_id=scope_id,
                created_at=now,
                created_by=created_by,
            )
            .returning(role_bindings.c.id)
        )
    ).scalar_one()
    row = (await conn.execute(_QUERY.where(role_bindings.c.id == binding_id))).one()
    return _binding(row)


async def list_bindings(
    conn: AsyncConnection, where: ColumnElement[bool] | None = None, *, user: str | None = None
) -> list[Binding]:
    query = _QUERY.where(where if where is not None else true()).order_by(
        users.c.name, role_bindings.c.id
    )
    if user is not None:
        query = query.where(users.c.name == user)
    return [_binding(row) for row in await conn.execute(query)]


async def bindings_of(conn: AsyncConnection, user_id: int) -> list[Binding]:
    """Every binding of one user (to build who is acting)."""
    query = _QUERY.where(role_bindings.c.user_id == user_id).order_by(role_bindings.c.id)
    return [_binding(row) for row in await conn.execute(query)]


async def delete_binding(
    conn: AsyncConnection,
    *,
    user_id: int,
    role: str,
    scope_kind: ScopeKind,
    scope_id: int,
    where: ColumnElement[bool] | None = None,
) -> bool:
    """Remove one binding in scope; False when no such row was removed."""
    removed = await conn.execute(
        delete(role_bindings)
        .where(
            role_bindings.c.user_id == user_id,
            role_bindings.c.role == role,
            role_bindings.c.scope_kind == scope_kind,
            role_bindings.c.scope_id == scope_id,
            where if where is not None else true(),
        )
        .returning(role_bindings.c.id)
    )
    return removed.one_or_none() is not None
