"""Admin tokens (``fga-…``): a user's bearer credential for the admin API, stored hashed.

The digest is SHA-256, or HMAC-SHA-256 with the key pepper (``fairgate.auth.pepper``).

There is no cache: the admin API resolves the token on every request, so a
revoked token, a disabled user or a removed role binding applies at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, insert, or_, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.tables import admin_tokens, users

__all__ = [
    "AdminToken",
    "by_id",
    "insert_token",
    "list_tokens",
    "live_tokens",
    "rehash_token",
    "resolve",
    "revoke_token",
]


@dataclass(frozen=True, slots=True)
class AdminToken:
    """An admin token as listed: its id and display prefix, never the secret."""

    id: str
    user_id: int
    user: str
    name: str | None
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


_QUERY = select(
    admin_tokens.c.id,
    admin_tokens.c.user_id,
    users.c.name.label("user"),
    admin_tokens.c.name,
    admin_tokens.c.prefix,
    admin_tokens.c.created_at,
    admin_tokens.c.expires_at,
    admin_tokens.c.revoked_at,
).join_from(admin_tokens, users, admin_tokens.c.user_id == users.c.id)


async def insert_token(
    conn: AsyncConnection,
    *,
    token_id: str,
    user_id: int,
    name: str | None,
    prefix: str,
    secret_sha256: bytes,
    expires_at: datetime | None,
    now: datetime,
) -> AdminToken:
    await conn.execute(
        insert(admin_tokens).values(
            id=token_id,
            user_id=user_id,
            name=name,
            prefix=prefix,
            secret_sha256=secret_sha256,
            created_at=now,
            expires_at=expires_at,
        )
    )
    row = (await conn.execute(_QUERY.where(admin_tokens.c.id == token_id))).one()
    return AdminToken(**row._mapping)


async def by_id(conn: AsyncConnection, token_id: str) -> AdminToken | None:
    row = (await conn.execute(_QUERY.where(admin_tokens.c.id == token_id))).one_or_none()
    return None if row is None else AdminToken(**row._mapping)


async def list_tokens(
    conn: AsyncConnection, where: ColumnElement[bool] | None = None, *, user: str | None = None
) -> list[AdminToken]:
    query = _QUERY.where(where if where is not None else true()).order_by(admin_tokens.c.id)
    if user is not None:
        query = query.where(users.c.name == user)
    return [AdminToken(**row._mapping) for row in await conn.execute(query)]


async def live_tokens(conn: AsyncConnection, user: str) -> list[AdminToken]:
    """The user's admin tokens not revoked yet: those disabling the user revokes."""
    query = _QUERY.where(users.c.name == user, admin_tokens.c.revoked_at.is_(None))
    return [
        AdminToken(**row._mapping) for row in await conn.execute(query.order_by(admin_tokens.c.id))
    ]


async def revoke_token(
    conn: AsyncConnection, token_id: str, now: datetime, where: ColumnElement[bool] | None = None
) -> bool:
    changed = await conn.execute(
        update(admin_tokens)
        .where(
            admin_tokens.c.id == token_id,
            admin_tokens.c.revoked_at.is_(None),
            where if where is not None else true(),
        )
        .values(revoked_at=now)
        .returning(admin_tokens.c.id)
    )
    return changed.one_or_none() is not None


async def resolve(
    conn: AsyncConnection, digests: Sequence[bytes], now: datetime
) -> tuple[int, str, bytes] | None:
    """``(user id, user name, stored digest)`` of a live token of an enabled user stored
    under one of ``digests`` (its peppered and its plain digest), else None."""
    query = (
        select(users.c.id, users.c.name, admin_tokens.c.secret_sha256)
        .join_from(admin_tokens, users, admin_tokens.c.user_id == users.c.id)
        .where(
            admin_tokens.c.secret_sha256.in_(digests),
            admin_tokens.c.revoked_at.is_(None),
            or_(admin_tokens.c.expires_at.is_(None), admin_tokens.c.expires_at > now),
            users.c.disabled_at.is_(None),
        )
    )
    row = (await conn.execute(query)).first()
    return None if row is None else (row.id, row.name, bytes(row.secret_sha256))


async def rehash_token(conn: AsyncConnection, old: bytes, new: bytes) -> None:
    """Store ``new`` in place of the digest ``old`` (a re-hash with the key pepper)."""
    await conn.execute(
        update(admin_tokens).where(admin_tokens.c.secret_sha256 == old).values(secret_sha256=new)
    )
