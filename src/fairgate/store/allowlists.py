"""IP allowlists of organisations, teams and keys: at most one row each, replaced whole.

Functions run in the caller's transaction and take the scope ``where`` clauses
built by the tenancy layer. ``put`` writes the access-change feed in the same
transaction (the organisation, the team or the key), so every gateway's key
cache drops the keys the list applies to and loads the new list with them at
their next request; the lists themselves are read with the key
(``StoreKeyDirectory``), never per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, delete, insert, null, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store import access_changes
from fairgate.store.tables import allowlists, keys, orgs, teams

__all__ = ["Allowlist", "Kind", "Subject", "list_allowlists", "put"]

Kind = Literal["org", "team", "key"]


@dataclass(frozen=True, slots=True)
class Subject:
    """What a list belongs to: ``name`` is the organisation's or team's name, or the key id.

    ``org_id`` and ``team_id`` place it in the tree (``team_id`` None for an
    organisation) for the audit trail and the scope checks.
    """

    kind: Kind
    name: str
    org_id: int
    team_id: int | None


@dataclass(frozen=True, slots=True)
class Allowlist:
    """One stored list; ``team`` is None for an organisation's list."""

    kind: str
    name: str
    org: str
    team: str | None
    cidrs: tuple[str, ...]
    updated_at: datetime
    updated_by: str


_COLUMNS = (allowlists.c.kind, allowlists.c.cidrs, allowlists.c.updated_at, allowlists.c.updated_by)


def _queries(
    org_where: ColumnElement[bool], team_where: ColumnElement[bool], key_where: ColumnElement[bool]
) -> list[Select[Any]]:
    """One query per kind, each over the tables the scope clauses name."""
    of_org = (
        select(orgs.c.name.label("name"), orgs.c.name.label("org"), null().label("team"), *_COLUMNS)
        .join_from(allowlists, orgs, allowlists.c.org_id == orgs.c.id)
        .where(org_where)
    )
    of_team = (
        select(teams.c.name.label("name"), orgs.c.name.label("org"), teams.c.name.label("team"))
        .add_columns(*_COLUMNS)
        .join_from(allowlists, teams, allowlists.c.team_id == teams.c.id)
        .join(orgs, teams.c.org_id == orgs.c.id)
        .where(team_where)
    )
    of_key = (
        select(keys.c.id.label("name"), orgs.c.name.label("org"), teams.c.name.label("team"))
        .add_columns(*_COLUMNS)
        .join_from(allowlists, keys, allowlists.c.key_id == keys.c.id)
        .join(teams, keys.c.team_id == teams.c.id)
        .join(orgs, teams.c.org_id == orgs.c.id)
        .where(key_where)
    )
    return [of_org, of_team, of_key]


async def list_allowlists(
    conn: AsyncConnection,
    *,
    org_where: ColumnElement[bool],
    team_where: ColumnElement[bool],
    key_where: ColumnElement[bool],
) -> list[Allowlist]:
    """The lists each clause lets through: organisations', then teams', then keys', by name."""
    found: list[Allowlist] = []
    for query in _queries(org_where, team_where, key_where):
        rows = await conn.execute(query.order_by("name"))
        found.extend(
            Allowlist(
                kind=row.kind,
                name=row.name,
                org=row.org,
                team=row.team,
                cidrs=tuple(row.cidrs),
                updated_at=row.updated_at,
                updated_by=row.updated_by,
            )
            for row in rows
        )
    return found


def _match(subject: Subject, key_id: str | None) -> ColumnElement[bool]:
    if subject.kind == "org":
        return allowlists.c.org_id == subject.org_id
    if subject.kind == "team":
        return allowlists.c.team_id == subject.team_id
    return allowlists.c.key_id == key_id


async def put(
    conn: AsyncConnection, subject: Subject, cidrs: Sequence[str], by: str, now: datetime
) -> bool:
    """Replace ``subject``'s list with ``cidrs`` (empty: remove it); whether anything changed.

    The keys it applies to are marked changed and the subject goes into the
    access-change feed, so cached keys are dropped everywhere.
    """
    key_id = subject.name if subject.kind == "key" else None
    where = _match(subject, key_id)
    current = (await conn.execute(select(allowlists.c.cidrs).where(where))).scalar_one_or_none()
    if (list(current) if current is not None else []) == list(cidrs):
        return False
    if not cidrs:
        await conn.execute(delete(allowlists).where(where))
    elif current is None:
        await conn.execute(
            insert(allowlists).values(
                kind=subject.kind,
                org_id=subject.org_id if subject.kind == "org" else None,
                team_id=subject.team_id if subject.kind == "team" else None,
                key_id=key_id,
                cidrs=list(cidrs),
                updated_at=now,
                updated_by=by,
            )
        )
    else:
        await conn.execute(
            update(allowlists).where(where).values(cidrs=list(cidrs), updated_at=now, updated_by=by)
        )
    await _mark_keys(conn, subject, now)
    await access_changes.record(conn, subject.kind, subject.name, now)
    return True


async def _mark_keys(conn: AsyncConnection, subject: Subject, now: datetime) -> None:
    """Mark the keys the list applies to as changed (``StoreKeyDirectory.key_changes``)."""
    if subject.kind == "key":
        applies = keys.c.id == subject.name
    elif subject.kind == "team":
        applies = keys.c.team_id == subject.team_id
    else:
        applies = keys.c.team_id.in_(select(teams.c.id).where(teams.c.org_id == subject.org_id))
    await conn.execute(update(keys).where(applies).values(changed_at=now))
