"""Audit events: one row per state change and per failed admin authentication, append only.

``org_id`` and ``team_id`` place an event in the tree, so a listing can be
filtered to what the reader may see; they are plain integers, not foreign keys,
because an event outlives what it names.

Each event is sealed into a hash chain (``fairgate.store.audit_chain``) when it
is inserted. Appends are serialised so that concurrent writers, in one process
or several, still form one chain: on SQLite every write transaction holds the
database's write lock from its start (``BEGIN IMMEDIATE``); on PostgreSQL the
append takes a transaction-level advisory lock before it reads the chain's head,
held until the transaction (the change and its event) commits. The unique
``seq`` column backs this up: two appends that read the same head cannot both
commit. Each append logs its ``seq`` and the new head hash, so the head is
anchored outside the database.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, insert, select, text, true
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.audit_chain import GENESIS, ChainedRow, event_hash
from fairgate.store.tables import audit_events

__all__ = ["AuditEvent", "chain_rows", "insert_event", "list_events"]

log = logging.getLogger("fairgate.audit")

_CHAIN_LOCK_ID = 0x61756469  # "audi": the audit chain's advisory lock, shared by every gateway
_PAGE = 1000

_EVENT_COLUMNS = (
    audit_events.c.id,
    audit_events.c.seq,
    audit_events.c.at,
    audit_events.c.actor,
    audit_events.c.action,
    audit_events.c.target,
    audit_events.c.org_id,
    audit_events.c.team_id,
    audit_events.c.remote,
    audit_events.c.detail,
    audit_events.c.hash,
)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """``actor`` did ``action`` (``key.revoked``, ``auth.failed``…) to ``target`` at ``at``.

    ``seq`` is the event's place in the hash chain and ``hash`` its seal (hex).
    """

    id: int
    seq: int
    at: datetime
    actor: str
    action: str
    target: str | None
    org_id: int | None
    team_id: int | None
    remote: str | None
    detail: Mapping[str, Any] | None
    hash: str


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
    """Append one event to the chain, in ``conn``'s transaction (see the module docstring)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _CHAIN_LOCK_ID})
    head = (
        await conn.execute(
            select(audit_events.c.seq, audit_events.c.hash)
            .order_by(audit_events.c.seq.desc())
            .limit(1)
        )
    ).first()
    seq, prev_hash = (1, GENESIS) if head is None else (head.seq + 1, bytes(head.hash))
    content: dict[str, Any] = {
        "at": at,
        "actor": actor,
        "action": action,
        "target": target,
        "org_id": org_id,
        "team_id": team_id,
        "remote": remote,
        "detail": None if detail is None else dict(detail),
    }
    sealed = event_hash(seq=seq, prev_hash=prev_hash, **content)
    await conn.execute(
        insert(audit_events).values(seq=seq, prev_hash=prev_hash, hash=sealed, **content)
    )
    log.info("audit: %s appended as seq %d, chain head %s", action, seq, sealed.hex())


async def list_events(
    conn: AsyncConnection,
    where: ColumnElement[bool] | None = None,
    *,
    since: datetime | None = None,
    actor: str | None = None,
    action: str | None = None,
    before_id: int | None = None,
    limit: int = 100,
) -> list[AuditEvent]:
    """Newest first; ``before_id`` pages back from an earlier page's last id."""
    query = select(*_EVENT_COLUMNS).where(where if where is not None else true())
    if since is not None:
        query = query.where(audit_events.c.at >= since)
    if actor is not None:
        query = query.where(audit_events.c.actor == actor)
    if action is not None:
        query = query.where(audit_events.c.action == action)
    if before_id is not None:
        query = query.where(audit_events.c.id < before_id)
    query = query.order_by(audit_events.c.id.desc()).limit(limit)
    return [_event(row) for row in await conn.execute(query)]


async def chain_rows(conn: AsyncConnection) -> AsyncIterator[ChainedRow]:
    """Every event in ``seq`` order, read a page at a time."""
    after = 0
    while True:
        query = (
            select(*audit_events.c)
            .where(audit_events.c.seq > after)
            .order_by(audit_events.c.seq)
            .limit(_PAGE)
        )
        rows = (await conn.execute(query)).all()
        for row in rows:
            values = dict(row._mapping)
            values["prev_hash"] = bytes(values["prev_hash"])
            values["hash"] = bytes(values["hash"])
            yield ChainedRow(**values)
        if len(rows) < _PAGE:
            return
        after = rows[-1].seq


def _event(row: Any) -> AuditEvent:
    values = dict(row._mapping)
    values["hash"] = bytes(values["hash"]).hex()
    return AuditEvent(**values)
