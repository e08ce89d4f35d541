"""Audit events: one row per state change and per failed admin authentication, append only.

``org_id`` and ``team_id`` place an event in the tree, so a listing can be
filtered to what the reader may see; they are plain integers, not foreign keys,
because an event outlives what it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, insert, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.tables import audit_events

__all__ = ["AuditEvent", "insert_event", "list_events"]


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """``actor`` did ``action`` (``key.revoked``, ``auth.failed``…) to ``target`` at ``at``."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str | None
    org_id: int | None
    team_id: int | None
    remote: str | None
    detail: Mapping[str, Any] | None


async def insert_event(
    conn: AsyncConnection,
    *,
    at: datetime,
    actor: str,
    action: str,
    target: str | None = None,
    org_id: int | None = None,
    team_id: int | None = None,
    remote: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> None:
    await conn.execute(
        insert(audit_events).values(
            at=at,
            actor=actor,
            action=action,
            target=target,
            org_id=org_id,
            team_id=team_id,
            remote=remote,
            detail=None if detail is None else dict(detail),
        )
    )


async def list_events(
    conn: AsyncConnection,
    where: ColumnElement[bool] | None = None,
    *,
    since: datetime | None = None,
    action: str | None = None,
    before_id: int | None = None,
    limit: int = 100,
) -> list[AuditEvent]:
    """Newest first; ``before_id`` pages back from an earlier page's last id."""
    query = select(*audit_events.c).where(where if where is not None else true())
    if since is not None:
        query = query.where(audit_events.c.at >= since)
    if action is not None:
        query = query.where(audit_events.c.action == action)
    if before_id is not None:
        query = query.where(audit_events.c.id < before_id)
    query = query.order_by(audit_events.c.id.desc()).limit(limit)
    return [AuditEvent(**row._mapping) for row in await conn.execute(query)]
