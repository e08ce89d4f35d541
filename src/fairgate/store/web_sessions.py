"""Web sessions: a signed-in browser, found by the SHA-256 of its cookie value.

``resolve`` is the one query a page request makes: the session joined with its
account (and, for an admin session, its user), alive only while the session is
within both timeouts and its account is active and that account's user enabled
(an admin session: its user enabled), so a suspension or a disabled user applies
on the next request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import and_, delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased

from fairgate.store.accounts import State
from fairgate.store.tables import accounts, teams, users, web_sessions

__all__ = [
    "Kind",
    "SessionRow",
    "close",
    "close_all",
    "close_user",
    "insert_session",
    "prune",
    "resolve",
    "touch",
]

Kind = Literal["account", "admin"]

_account_users = aliased(users)
"""The user an account was approved as (``users`` itself joins an admin session's)."""


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A live session and, for an account session, its account's public fields."""

    kind: Kind
    csrf_sha256: bytes
    seen_at: datetime
    expires_at: datetime
    actor_name: str | None
    user_id: int | None
    account_id: int | None
    email: str | None
    state: State | None
    account_user_id: int | None
    team: str | None
    account_created_at: datetime | None
    sso_roles: list[dict[str, str | None]] | None = None
    id_token_hint: str | None = None


async def insert_session(
    conn: AsyncConnection,
    *,
    id_sha256: bytes,
    kind: Kind,
    csrf_sha256: bytes,
    now: datetime,
    expires_at: datetime,
    account_id: int | None = None,
    actor_name: str | None = None,
    user_id: int | None = None,
    sso_roles: list[dict[str, str | None]] | None = None,
    id_token_hint: str | None = None,
) -> None:
    await conn.execute(
        insert(web_sessions).values(
            id_sha256=id_sha256,
            kind=kind,
            account_id=account_id,
            actor_name=actor_name,
            user_id=user_id,
            csrf_sha256=csrf_sha256,
            created_at=now,
            seen_at=now,
            expires_at=expires_at,
            sso_roles=sso_roles,
            id_token_hint=id_token_hint,
        )
    )


async def resolve(
    conn: AsyncConnection, id_sha256: bytes, *, now: datetime, idle_since: datetime
) -> SessionRow | None:
    """The session stored under ``id_sha256`` if seen after ``idle_since``, not expired at
    ``now``, and its account active with its user enabled (an account session) or its user
    enabled (an admin session of a user); else None. One SELECT."""
    query = (
        select(
            web_sessions.c.kind,
            web_sessions.c.csrf_sha256,
            web_sessions.c.seen_at,
            web_sessions.c.expires_at,
            web_sessions.c.actor_name,
            web_sessions.c.user_id,
            web_sessions.c.account_id,
            accounts.c.email,
            accounts.c.state,
            accounts.c.user_id.label("account_user_id"),
            teams.c.name.label("team"),
            accounts.c.created_at.label("account_created_at"),
            web_sessions.c.sso_roles,
            web_sessions.c.id_token_hint,
        )
        .select_from(web_sessions)
        .outerjoin(accounts, web_sessions.c.account_id == accounts.c.id)
        .outerjoin(teams, accounts.c.team_id == teams.c.id)
        .outerjoin(users, web_sessions.c.user_id == users.c.id)
        .outerjoin(_account_users, accounts.c.user_id == _account_users.c.id)
        .where(
            web_sessions.c.id_sha256 == id_sha256,
            web_sessions.c.expires_at > now,
            web_sessions.c.seen_at > idle_since,
            or_(
                and_(
                    web_sessions.c.kind == "account",
                    accounts.c.state == "active",
                    _account_users.c.disabled_at.is_(None),
                ),
                and_(
                    web_sessions.c.kind == "admin",
                    or_(web_sessions.c.user_id.is_(None), users.c.disabled_at.is_(None)),
                ),
            ),
        )
    )
    row = (await conn.execute(query)).one_or_none()
    if row is None:
        return None
    return SessionRow(**row._mapping)


async def touch(conn: AsyncConnection, id_sha256: bytes, now: datetime) -> None:
    """Record activity (the idle timeout counts from ``seen_at``)."""
    await conn.execute(
        update(web_sessions).where(web_sessions.c.id_sha256 == id_sha256).values(seen_at=now)
    )


async def close(conn: AsyncConnection, id_sha256: bytes) -> None:
    await conn.execute(delete(web_sessions).where(web_sessions.c.id_sha256 == id_sha256))


async def close_all(conn: AsyncConnection, account_id: int) -> int:
    """Delete every session of an account; how many there were."""
    result = await conn.execute(delete(web_sessions).where(web_sessions.c.account_id == account_id))
    return result.rowcount


async def prune(conn: AsyncConnection, *, now: datetime, idle_since: datetime) -> int:
    """Delete the sessions past either timeout; how many."""
    result = await conn.execute(
        delete(web_sessions).where(
            or_(web_sessions.c.expires_at <= now, web_sessions.c.seen_at <= idle_since)
        )
    )
    return result.rowcount


async def close_user(conn: AsyncConnection, user_id: int, name: str | None = None) -> int:
    """Delete every session of a user: their admin and single sign-on sessions and the
    sessions of the web account bound to them; how many there were. With ``name``, also
    the single sign-on sessions of that person opened while no store user held the name
    (``sso:NAME``, its case ignored as the sign-in's disabled check ignores it)."""
    bound = select(accounts.c.id).where(accounts.c.user_id == user_id).scalar_subquery()
    theirs = or_(web_sessions.c.user_id == user_id, web_sessions.c.account_id.in_(bound))
    if name is not None:
        unlinked = and_(
            web_sessions.c.user_id.is_(None),
            func.lower(web_sessions.c.actor_name) == f"sso:{name}".lower(),
        )
        theirs = or_(theirs, unlinked)
    result = await conn.execute(delete(web_sessions).where(theirs))
    return result.rowcount
