"""SSO logins in progress: the state, nonce and PKCE verifier of one browser's login.

``take`` deletes the row as it reads it, in the caller's write transaction, so a
login is finished at most once (a replayed callback finds nothing) and by any
replica, whichever the provider sends the browser back to.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.tables import sso_logins

__all__ = ["PendingLogin", "insert_login", "pending", "prune", "take"]


@dataclass(frozen=True, slots=True)
class PendingLogin:
    state: str
    nonce: str
    code_verifier: str
    expires_at: datetime


async def insert_login(
    conn: AsyncConnection,
    *,
    id_sha256: bytes,
    state: str,
    nonce: str,
    code_verifier: str,
    now: datetime,
    expires_at: datetime,
) -> None:
    await conn.execute(
        insert(sso_logins).values(
            id_sha256=id_sha256,
            state=state,
            nonce=nonce,
            code_verifier=code_verifier,
            created_at=now,
            expires_at=expires_at,
        )
    )


async def take(conn: AsyncConnection, id_sha256: bytes, *, now: datetime) -> PendingLogin | None:
    """The login stored under ``id_sha256``, deleted; None if unknown or expired."""
    row = (
        await conn.execute(
            select(
                sso_logins.c.state,
                sso_logins.c.nonce,
                sso_logins.c.code_verifier,
                sso_logins.c.expires_at,
            ).where(sso_logins.c.id_sha256 == id_sha256)
        )
    ).one_or_none()
    if row is None:
        return None
    deleted = await conn.execute(delete(sso_logins).where(sso_logins.c.id_sha256 == id_sha256))
    if deleted.rowcount != 1:  # another replica took it between the two statements
        return None
    login = PendingLogin(**row._mapping)
    return login if login.expires_at > now else None


async def prune(conn: AsyncConnection, *, now: datetime) -> int:
    """Delete the logins never finished in time; how many."""
    result = await conn.execute(delete(sso_logins).where(sso_logins.c.expires_at <= now))
    return result.rowcount


async def pending(conn: AsyncConnection) -> int:
    """Logins in progress (expired ones included until pruned)."""
    return int((await conn.execute(select(func.count()).select_from(sso_logins))).scalar_one())
