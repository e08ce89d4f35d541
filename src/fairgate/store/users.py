"""Users of the admin API: a name, an optional home organisation, disabled rather than deleted.

Functions run in the caller's transaction and take the scope ``where`` clause
built by the tenancy layer (see ``fairgate.store.orgs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, case, func, insert, literal, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.tables import admin_tokens, orgs, users

__all__ = [
    "User",
    "by_id",
    "by_name",
    "disable",
    "disabled_namesake",
    "enable",
    "insert_user",
    "list_users",
    "namesake",
    "rename",
]


@dataclass(frozen=True, slots=True)
class User:
    """A person or service holding role bindings; ``org`` is the organisation that created it."""

    id: int
    name: str
    org_id: int | None
    org: str | None
    created_at: datetime
    disabled_at: datetime | None


_QUERY = select(
    users.c.id,
    users.c.name,
    users.c.org_id,
    orgs.c.name.label("org"),
    users.c.created_at,
    users.c.disabled_at,
).outerjoin_from(users, orgs, users.c.org_id == orgs.c.id)


async def insert_user(
    conn: AsyncConnection, *, name: str, org_id: int | None, now: datetime
) -> User:
    user_id = (
        await conn.execute(
            insert(users)
            .values(name=name, name_key=name.lower(), org_id=org_id, created_at=now)
            .returning(users.c.id)
        )
    ).scalar_one()
    row = (await conn.execute(_QUERY.where(users.c.id == user_id))).one()
    return User(**row._mapping)


async def list_users(conn: AsyncConnection, where: ColumnElement[bool] | None = None) -> list[User]:
    query = _QUERY.where(where if where is not None else true()).order_by(users.c.name)
    return [User(**row._mapping) for row in await conn.execute(query)]


async def by_name(
    conn: AsyncConnection, name: str, where: ColumnElement[bool] | None = None
) -> User | None:
    query = _QUERY.where(users.c.name == name, where if where is not None else true())
    row = (await conn.execute(query)).one_or_none()
    return None if row is None else User(**row._mapping)


async def namesake(conn: AsyncConnection, name: str) -> bool:
    """Whether any user's name equals ``name`` without regard to case."""
    query = select(users.c.id).where(func.lower(users.c.name) == name.lower())
    return (await conn.execute(query.limit(1))).first() is not None


async def disabled_namesake(conn: AsyncConnection, name: str) -> bool:
    """Whether a disabled user's name equals ``name`` without regard to case (names are
    ASCII, so SQL ``lower`` is exact on every backend)."""
    query = select(users.c.id).where(
        func.lower(users.c.name) == name.lower(), users.c.disabled_at.is_not(None)
    )
    return (await conn.execute(query.limit(1))).first() is not None


async def by_id(conn: AsyncConnection, user_id: int) -> User | None:
    row = (await conn.execute(_QUERY.where(users.c.id == user_id))).one_or_none()
    return None if row is None else User(**row._mapping)


async def rename(conn: AsyncConnection, user_id: int, name: str) -> None:
    """Give a user another name, keeping its id (and so its bindings, keys and tokens).
    Its ``name_key`` follows, unless it has none (a case variant older than the key)."""
    key = case((users.c.name_key.is_(None), None), else_=literal(name.lower()))
    await conn.execute(update(users).where(users.c.id == user_id).values(name=name, name_key=key))


async def disable(
    conn: AsyncConnection, name: str, now: datetime, where: ColumnElement[bool] | None = None
) -> int | None:
    """Disable a user and revoke their admin tokens; their id, or None if none in scope changed."""
    user_id: int | None = (
        await conn.execute(
            update(users)
            .where(
                users.c.name == name,
                users.c.disabled_at.is_(None),
                where if where is not None else true(),
            )
            .values(disabled_at=now)
            .returning(users.c.id)
        )
    ).scalar_one_or_none()
    if user_id is not None:
        await conn.execute(
            update(admin_tokens)
            .where(admin_tokens.c.user_id == user_id, admin_tokens.c.revoked_at.is_(None))
            .values(revoked_at=now)
        )
    return user_id


async def enable(
    conn: AsyncConnection, name: str, where: ColumnElement[bool] | None = None
) -> int | None:
    """Enable a disabled user (their revoked tokens stay revoked); their id, or None if none
    in scope changed."""
    user_id: int | None = (
        await conn.execute(
            update(users)
            .where(
                users.c.name == name,
                users.c.disabled_at.is_not(None),
                where if where is not None else true(),
            )
            .values(disabled_at=None)
            .returning(users.c.id)
        )
    ).scalar_one_or_none()
    return user_id
