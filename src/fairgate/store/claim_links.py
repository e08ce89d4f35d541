"""Claim links: one per key handed over by link; found by the hash of its token.

The row never holds anything that opens it: ``lookup`` is a hash of the link's
token and ``sealed`` the key's secret under a key only the token derives
(``fairgate.tenancy.sealing``). Redeeming is one UPDATE moving ``claimed_at``
off NULL for an unexpired link of a live key, so of two concurrent redeems one
changes the row and the other matches nothing; the same transaction then wipes
``sealed``. Functions run in the caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, exists, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.tables import claim_links, keys, teams

__all__ = ["Burnt", "burn", "insert_link", "is_open"]


@dataclass(frozen=True, slots=True)
class Burnt:
    """A link just redeemed: its id, its key, the sealed secret as it was, and the digest
    the key's secret is stored under now (a rotated key no longer matches the sealed one),
    and the key's team and organisation ids (for the audit event)."""

    id: str
    key_id: str
    sealed: bytes
    secret_sha256: bytes
    team_id: int
    org_id: int


async def insert_link(
    conn: AsyncConnection,
    *,
    link_id: str,
    key_id: str,
    lookup: bytes,
    sealed: bytes,
    created_by: str,
    now: datetime,
    expires_at: datetime,
) -> None:
    await conn.execute(
        insert(claim_links).values(
            id=link_id,
            key_id=key_id,
            lookup=lookup,
            sealed=sealed,
            created_at=now,
            created_by=created_by,
            expires_at=expires_at,
        )
    )


def _open(lookup: bytes, now: datetime) -> ColumnElement[bool]:
    """The link stored under ``lookup``: unclaimed, unexpired, and its key live."""
    live_key = exists().where(
        keys.c.id == claim_links.c.key_id,
        keys.c.revoked_at.is_(None),
        or_(keys.c.expires_at.is_(None), keys.c.expires_at > now),
    )
    return and_(
        claim_links.c.lookup == lookup,
        claim_links.c.claimed_at.is_(None),
        claim_links.c.expires_at > now,
        live_key,
    )


async def is_open(conn: AsyncConnection, lookup: bytes, now: datetime) -> bool:
    """Whether the link under ``lookup`` could be redeemed now (it changes nothing)."""
    found = await conn.execute(select(claim_links.c.id).where(_open(lookup, now)))
    return found.first() is not None


async def burn(conn: AsyncConnection, lookup: bytes, now: datetime) -> Burnt | None:
    """Redeem the link under ``lookup`` if it is open: set ``claimed_at`` in one UPDATE,
    then wipe its sealed secret; None when it was not open (used, expired, never there)."""
    claimed = (
        await conn.execute(
            update(claim_links)
            .where(_open(lookup, now))
            .values(claimed_at=now)
            .returning(claim_links.c.id, claim_links.c.key_id, claim_links.c.sealed)
        )
    ).first()
    if claimed is None or claimed.sealed is None:
        return None
    await conn.execute(
        update(claim_links).where(claim_links.c.id == claimed.id).values(sealed=None)
    )
    key = (
        await conn.execute(
            select(keys.c.secret_sha256, keys.c.team_id, teams.c.org_id)
            .join_from(keys, teams, keys.c.team_id == teams.c.id)
            .where(keys.c.id == claimed.key_id)
        )
    ).one()
    return Burnt(
        claimed.id,
        claimed.key_id,
        bytes(claimed.sealed),
        bytes(key.secret_sha256),
        key.team_id,
        key.org_id,
    )
