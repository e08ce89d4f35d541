"""Web accounts: an e-mail address, an argon2id hash, a state; approved, bound to a user and team.

Functions run in the caller's transaction. Addresses are stored lower-cased by the
caller (``fairgate.accounts.emails``); this module compares them as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.tables import accounts, teams, users

__all__ = [
    "AccountRow",
    "State",
    "by_email",
    "by_id",
    "claim_notice",
    "delete_account",
    "insert_account",
    "list_accounts",
    "release_notice",
    "set_hash",
    "set_state",
    "unnotified",
]

State = Literal["pending", "active", "suspended"]


@dataclass(frozen=True, slots=True)
class AccountRow:
    """An account as stored, its hash included (never shown, never logged)."""

    id: int
    email: str
    password_hash: str
    state: State
    user_id: int | None
    team_id: int | None
    team: str | None
    created_at: datetime
    approved_at: datetime | None
    suspended_at: datetime | None
    notified_at: datetime | None
    user_disabled: bool
    """Its user is disabled (``fairgate users disable``, SCIM ``active: false``): the
    account may not sign in or act, whatever its own state."""


_QUERY = select(
    accounts.c.id,
    accounts.c.email,
    accounts.c.password_hash,
    accounts.c.state,
    accounts.c.user_id,
    accounts.c.team_id,
    teams.c.name.label("team"),
    accounts.c.created_at,
    accounts.c.approved_at,
    accounts.c.suspended_at,
    accounts.c.notified_at,
    users.c.disabled_at.is_not(None).label("user_disabled"),
).select_from(
    accounts.outerjoin(teams, accounts.c.team_id == teams.c.id).outerjoin(
        users, accounts.c.user_id == users.c.id
    )
)


async def insert_account(
    conn: AsyncConnection, *, email: str, password_hash: str, now: datetime
) -> int:
    """Insert a pending account; its id. StoreConflict when the address has one."""
    account_id: int = (
        await conn.execute(
            insert(accounts)
            .values(email=email, password_hash=password_hash, state="pending", created_at=now)
            .returning(accounts.c.id)
        )
    ).scalar_one()
    return account_id


async def by_email(conn: AsyncConnection, email: str) -> AccountRow | None:
    row = (await conn.execute(_QUERY.where(accounts.c.email == email))).one_or_none()
    return None if row is None else AccountRow(**row._mapping)


async def by_id(conn: AsyncConnection, account_id: int) -> AccountRow | None:
    row = (await conn.execute(_QUERY.where(accounts.c.id == account_id))).one_or_none()
    return None if row is None else AccountRow(**row._mapping)


async def lock_if_active(conn: AsyncConnection, account_id: int) -> bool:
    """Whether the account is active and its user enabled, holding both rows until the
    transaction ends (``SELECT … FOR UPDATE`` on PostgreSQL; on SQLite every write
    transaction already holds the database's write lock): a suspension or a disable
    that deletes the account's sessions runs before or after the caller's, not between."""
    account = (
        await conn.execute(
            select(accounts.c.state, accounts.c.user_id)
            .where(accounts.c.id == account_id)
            .with_for_update()
        )
    ).one_or_none()
    if account is None or account.state != "active" or account.user_id is None:
        return False
    user = (
        await conn.execute(
            select(users.c.disabled_at).where(users.c.id == account.user_id).with_for_update()
        )
    ).one_or_none()
    return user is not None and user.disabled_at is None


async def list_accounts(conn: AsyncConnection, *, pending: bool = False) -> list[AccountRow]:
    query = _QUERY.order_by(accounts.c.created_at, accounts.c.id)
    if pending:
        query = query.where(accounts.c.state == "pending")
    return [AccountRow(**row._mapping) for row in await conn.execute(query)]


async def set_hash(conn: AsyncConnection, account_id: int, old: str, new: str) -> bool:
    """Replace the hash ``old`` by ``new`` (a rehash); False when it changed meanwhile."""
    changed = await conn.execute(
        update(accounts)
        .where(accounts.c.id == account_id, accounts.c.password_hash == old)
        .values(password_hash=new)
        .returning(accounts.c.id)
    )
    return changed.one_or_none() is not None


async def set_state(
    conn: AsyncConnection,
    account_id: int,
    *,
    state: State,
    now: datetime,
    user_id: int | None = None,
    team_id: int | None = None,
) -> None:
    """Move an account to ``state``: active records the approval (and its user and team once
    given), suspended the suspension."""
    values: dict[str, object] = {"state": state}
    if state == "active":
        values["approved_at"] = now
        values["suspended_at"] = None
        if user_id is not None:
            values["user_id"] = user_id
            values["team_id"] = team_id
    elif state == "suspended":
        values["suspended_at"] = now
    await conn.execute(update(accounts).where(accounts.c.id == account_id).values(**values))


async def delete_account(conn: AsyncConnection, account_id: int) -> None:
    """Delete the account row (its sessions must be gone first: ``web_sessions.close_all``)."""
    await conn.execute(delete(accounts).where(accounts.c.id == account_id))


async def claim_notice(conn: AsyncConnection, account_id: int, now: datetime) -> bool:
    """Claim the one pending-sign-up alert of an account: True for the first claimer only."""
    changed = await conn.execute(
        update(accounts)
        .where(accounts.c.id == account_id, accounts.c.notified_at.is_(None))
        .values(notified_at=now)
        .returning(accounts.c.id)
    )
    return changed.one_or_none() is not None


async def release_notice(conn: AsyncConnection, account_id: int) -> None:
    """Give the alert's claim back (every channel failed): the next start tries again."""
    await conn.execute(update(accounts).where(accounts.c.id == account_id).values(notified_at=None))


async def unnotified(conn: AsyncConnection) -> list[AccountRow]:
    """Pending accounts whose alert was never claimed, oldest first."""
    query = _QUERY.where(accounts.c.state == "pending", accounts.c.notified_at.is_(None))
    return [AccountRow(**row._mapping) for row in await conn.execute(query.order_by(accounts.c.id))]
