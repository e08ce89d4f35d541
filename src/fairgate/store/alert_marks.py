"""Alert marks: who sends the soft-limit alert of one budget in one period, and whether it went.

    async with store.write() as conn:
        if await alert_marks.claim(conn, key, now=now, period_end=end, stale_after=600):
            ...                                   # this caller sends the alert
    async with store.write() as conn:
        await alert_marks.mark_sent(conn, key, now=now, channels={"webhook": "sent"})
        # or, when every channel failed:
        await alert_marks.release(conn, key)      # a later crossing claims it again

A mark is keyed by the SHA-256 of the budget's counter key (period label
included), so the claim is one ``INSERT … ON CONFLICT DO NOTHING`` on both back
ends: of several gateway processes claiming together, exactly one gets it.
A mark still unsent (``sent_at`` NULL) after ``stale_after`` seconds belongs to a
sender that died mid-way; the next claim takes it over, again for one caller.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.tables import alert_marks

__all__ = ["AlertMark", "claim", "find", "mark_sent", "prune", "release"]

_M = alert_marks.c


@dataclass(frozen=True, slots=True)
class AlertMark:
    """One stored mark; ``sent_at`` None while it is being sent."""

    counter_key: str
    period_end: datetime
    claimed_at: datetime
    sent_at: datetime | None
    channels: dict[str, str] | None


def _digest(counter_key: str) -> bytes:
    return hashlib.sha256(counter_key.encode()).digest()


def _insert(dialect: str) -> Any:
    return postgresql.insert(alert_marks) if dialect == "postgresql" else sqlite.insert(alert_marks)


async def claim(
    conn: AsyncConnection,
    counter_key: str,
    *,
    now: datetime,
    period_end: datetime,
    stale_after: float,
) -> bool:
    """Claim the alert of ``counter_key``; True when this caller got it and must send it.

    False when another caller holds it: sent already, or being sent for less than
    ``stale_after`` seconds.
    """
    digest = _digest(counter_key)
    statement = (
        _insert(conn.dialect.name)
        .values(
            key_sha256=digest,
            counter_key=counter_key,
            period_end=period_end,
            claimed_at=now,
            sent_at=None,
            channels=None,
        )
        .on_conflict_do_nothing(index_elements=["key_sha256"])
        .returning(_M.key_sha256)
    )
    if (await conn.execute(statement)).first() is not None:
        return True
    # Taken: over only when its sender left it unsent for too long. The condition is
    # checked again under the row lock, so of two callers only one takes it over.
    takeover = (
        update(alert_marks)
        .where(
            _M.key_sha256 == digest,
            _M.sent_at.is_(None),
            _M.claimed_at < now - timedelta(seconds=stale_after),
        )
        .values(claimed_at=now, channels=None)
    )
    return (await conn.execute(takeover)).rowcount == 1


async def mark_sent(
    conn: AsyncConnection, counter_key: str, *, now: datetime, channels: Mapping[str, str]
) -> None:
    """Record that the alert went out, with each channel's result."""
    await conn.execute(
        update(alert_marks)
        .where(_M.key_sha256 == _digest(counter_key))
        .values(sent_at=now, channels=dict(channels))
    )


async def release(conn: AsyncConnection, counter_key: str) -> bool:
    """Give the claim back (every channel failed); True when a mark was removed."""
    result = await conn.execute(
        delete(alert_marks).where(_M.key_sha256 == _digest(counter_key), _M.sent_at.is_(None))
    )
    return result.rowcount == 1


async def find(conn: AsyncConnection, counter_key: str) -> AlertMark | None:
    """The mark of ``counter_key``, or None."""
    row = (
        await conn.execute(select(alert_marks).where(_M.key_sha256 == _digest(counter_key)))
    ).first()
    if row is None:
        return None
    return AlertMark(
        counter_key=row.counter_key,
        period_end=row.period_end,
        claimed_at=row.claimed_at,
        sent_at=row.sent_at,
        channels=dict(row.channels) if row.channels is not None else None,
    )


async def prune(conn: AsyncConnection, *, before: datetime) -> int:
    """Delete the marks of periods that ended before ``before``; return how many."""
    result = await conn.execute(delete(alert_marks).where(_M.period_end < before))
    return max(0, result.rowcount)
