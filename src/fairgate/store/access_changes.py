"""The access-change feed: one row per change that can withdraw or alter a key's access.

    await access_changes.record(conn, "team", "lab-nlp", now)   # in the change's transaction
    rows = await access_changes.since(conn, after=41)           # what a reader has not seen

The repository functions that revoke, rotate or change a key, and that disable
or change a team, project or organisation, call ``record`` in their own
transaction, so whoever makes the change (admin API, CLI, the start-up sync,
another replica) writes the feed, and a change is in the feed exactly when it
is committed. Subjects are names, as a cached ``Principal`` carries them: a key
id, a team name, ``team/project``, an organisation name.

On PostgreSQL ``record`` also sends ``NOTIFY fairgate_access_changes`` in the same
transaction (delivered at commit, to every listening connection); on both back
ends it leaves a store ``notice`` (``TOPIC``) for after-commit callbacks.
Rows older than ``RETENTION`` are pruned by the next write: a reader only needs
those newer than its key cache's TTL.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.database import notice
from fairgate.store.tables import access_changes

__all__ = [
    "CHANNEL",
    "RETENTION",
    "TOPIC",
    "AccessChange",
    "Kind",
    "latest_id",
    "record",
    "since",
]

Kind = Literal["key", "team", "project", "org"]

CHANNEL = "fairgate_access_changes"
"""The PostgreSQL NOTIFY channel ``record`` signals."""

TOPIC = "access_change"
"""The store notice ``record`` leaves (``Store.on_commit``)."""

RETENTION = timedelta(days=1)
"""How long a row stays in the feed (far above any key cache TTL)."""


@dataclass(frozen=True, slots=True)
class AccessChange:
    """Change ``id`` of the feed: something about ``kind`` ``subject`` changed."""

    id: int
    kind: str
    subject: str


async def record(conn: AsyncConnection, kind: Kind, subject: str, now: datetime) -> None:
    """Add a change to the feed in ``conn``'s transaction (and prune rows past ``RETENTION``)."""
    await conn.execute(insert(access_changes).values(kind=kind, subject=subject, at=now))
    await conn.execute(delete(access_changes).where(access_changes.c.at < now - RETENTION))
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})
    notice(conn, TOPIC)


async def since(conn: AsyncConnection, after: int, *, limit: int = 1000) -> list[AccessChange]:
    """The changes with an id above ``after``, oldest first, at most ``limit``."""
    query = (
        select(access_changes.c.id, access_changes.c.kind, access_changes.c.subject)
        .where(access_changes.c.id > after)
        .order_by(access_changes.c.id)
        .limit(limit)
    )
    return [AccessChange(*row) for row in await conn.execute(query)]


async def latest_id(conn: AsyncConnection) -> int:
    """The newest change's id (0 for an empty feed)."""
    newest = (await conn.execute(select(func.max(access_changes.c.id)))).scalar_one_or_none()
    return int(newest or 0)
