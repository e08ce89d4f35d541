"""People known by an access token, their synthetic keys, revocations and exchanged keys.

    await people.ensure(conn, key_id, issuer, subject, team_id, project_id, limits, now)
    await people.set_revoked(conn, key_id, issuer, subject, now, by="user:ada")
    await people.add_secret(conn, key_id, digest, expires_at, now, keep=100)

A person is one row of ``people`` and one row of ``keys`` with the same id
(``jwt-`` + a hash of issuer and subject; ``fairgate.auth.jwt.person_key_id``).
The key row is what every other part of the gateway sees (limits, budgets, IP
allowlists, fair share, usage records, spend reports), as for any virtual key;
its ``secret_sha256`` is 32 random bytes nobody knows, so it can never be
presented as a virtual key. A revocation sets ``revoked_at`` on both rows and
writes the access-change feed (``key``, the key id) in the same transaction, so
every replica drops what it cached for that person at once; exchanged keys of
the person are refused with it (they authenticate as that key row). A person
holds at most ``keep`` unexpired exchanged keys: a new one past that deletes the
oldest (``add_secret``).

Both ``ensure`` and the revocation are upserts (``INSERT … ON CONFLICT``), so two
replicas meeting a new person at once both succeed with one row.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store import access_changes
from fairgate.store.tables import keys, orgs, people, person_keys, projects, teams

__all__ = [
    "Person",
    "add_secret",
    "ensure",
    "list_people",
    "prune_secrets",
    "set_restored",
    "set_revoked",
]

CREATED_BY = "system:jwt"


@dataclass(frozen=True, slots=True)
class Person:
    """A person as an administrator sees them (team and project of their key, if seen)."""

    key_id: str
    issuer: str
    subject: str
    first_seen: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None
    org: str | None
    team: str | None
    project: str | None


def _insert(conn: AsyncConnection, table: Any) -> Any:
    return postgresql.insert(table) if conn.dialect.name == "postgresql" else sqlite.insert(table)


async def ensure(
    conn: AsyncConnection,
    key_id: str,
    issuer: str,
    subject: str,
    team_id: int,
    project_id: int | None,
    limits: Mapping[str, int | None],
    now: datetime,
) -> bool:
    """The person's rows, created or moved to ``team_id``/``project_id`` with ``limits``;
    whether the key row changed (a change is written to the access-change feed)."""
    await conn.execute(
        _insert(conn, people)
        .values(key_id=key_id, issuer=issuer, subject=subject, first_seen=now)
        .on_conflict_do_nothing(index_elements=["key_id"])
    )
    await conn.execute(
        update(people)
        .where(people.c.key_id == key_id, people.c.first_seen.is_(None))
        .values(first_seen=now)
    )
    revoked = (
        await conn.execute(select(people.c.revoked_at).where(people.c.key_id == key_id))
    ).scalar_one_or_none()
    current = (
        await conn.execute(
            select(
                keys.c.team_id, keys.c.project_id, keys.c.rpm, keys.c.tpm, keys.c.max_in_flight
            ).where(keys.c.id == key_id)
        )
    ).one_or_none()
    wanted = (
        team_id,
        project_id,
        limits.get("rpm"),
        limits.get("tpm"),
        limits.get("max_in_flight"),
    )
    if current is not None and tuple(current) == wanted:
        return False
    values = {
        "team_id": team_id,
        "project_id": project_id,
        "rpm": limits.get("rpm"),
        "tpm": limits.get("tpm"),
        "rpd": limits.get("rpd"),
        "max_in_flight": limits.get("max_in_flight"),
        "changed_at": now,
    }
    await conn.execute(
        _insert(conn, keys)
        .values(
            id=key_id,
            prefix=key_id[:16],
            secret_sha256=os.urandom(32),
            tags=[],
            created_at=now,
            created_by=CREATED_BY,
            revoked_at=revoked,
            **values,
        )
        .on_conflict_do_update(index_elements=["id"], set_=values)
    )
    if current is not None:
        await access_changes.record(conn, "key", key_id, now)
    return True


async def set_revoked(
    conn: AsyncConnection, key_id: str, issuer: str, subject: str, now: datetime, *, by: str
) -> bool:
    """Revoke the person (known or not yet); False when they already were."""
    await conn.execute(
        _insert(conn, people)
        .values(key_id=key_id, issuer=issuer, subject=subject)
        .on_conflict_do_nothing(index_elements=["key_id"])
    )
    changed = await conn.execute(
        update(people)
        .where(people.c.key_id == key_id, people.c.revoked_at.is_(None))
        .values(revoked_at=now, revoked_by=by)
    )
    await conn.execute(
        update(keys)
        .where(keys.c.id == key_id, keys.c.revoked_at.is_(None))
        .values(revoked_at=now, changed_at=now)
    )
    await access_changes.record(conn, "key", key_id, now)
    return bool(changed.rowcount)


async def set_restored(conn: AsyncConnection, key_id: str, now: datetime) -> bool:
    """Lift a person's revocation; False when they were not revoked (or are unknown)."""
    changed = await conn.execute(
        update(people)
        .where(people.c.key_id == key_id, people.c.revoked_at.is_not(None))
        .values(revoked_at=None, revoked_by=None)
    )
    await conn.execute(
        update(keys)
        .where(keys.c.id == key_id, keys.c.created_by == CREATED_BY)
        .values(revoked_at=None, changed_at=now)
    )
    await access_changes.record(conn, "key", key_id, now)
    return bool(changed.rowcount)


async def list_people(
    conn: AsyncConnection, *, revoked_only: bool = False, issuer: str | None = None
) -> list[Person]:
    query = (
        select(
            people.c.key_id,
            people.c.issuer,
            people.c.subject,
            people.c.first_seen,
            people.c.revoked_at,
            people.c.revoked_by,
            orgs.c.name.label("org"),
            teams.c.name.label("team"),
            projects.c.name.label("project"),
        )
        .select_from(people)
        .outerjoin(keys, keys.c.id == people.c.key_id)
        .outerjoin(teams, teams.c.id == keys.c.team_id)
        .outerjoin(orgs, orgs.c.id == teams.c.org_id)
        .outerjoin(projects, projects.c.id == keys.c.project_id)
        .order_by(people.c.issuer, people.c.subject)
    )
    if revoked_only:
        query = query.where(people.c.revoked_at.is_not(None))
    if issuer is not None:
        query = query.where(people.c.issuer == issuer)
    return [Person(**row._mapping) for row in await conn.execute(query)]


async def add_secret(
    conn: AsyncConnection,
    key_id: str,
    digest: bytes,
    expires_at: datetime,
    now: datetime,
    *,
    keep: int,
) -> int:
    """An exchanged secret (its stored digest) for the person's key, valid until ``expires_at``,
    and at most ``keep`` of the person's unexpired ones kept: the oldest beyond are deleted and
    the access-change feed written (so every replica drops them from its key cache); how many
    were deleted.

    The person's key row is held first (``SELECT … FOR UPDATE`` on PostgreSQL; on SQLite
    every write transaction holds the database's write lock), so exchanges of one person on
    several replicas count one after the other and never leave more than ``keep``."""
    await conn.execute(select(keys.c.id).where(keys.c.id == key_id).with_for_update())
    await conn.execute(
        insert(person_keys).values(
            secret_sha256=digest, key_id=key_id, created_at=now, expires_at=expires_at
        )
    )
    beyond = (
        select(person_keys.c.secret_sha256)
        .where(
            person_keys.c.key_id == key_id,
            person_keys.c.expires_at >= now,
            person_keys.c.secret_sha256 != digest,
        )
        .order_by(person_keys.c.created_at.desc(), person_keys.c.secret_sha256.desc())
        .offset(keep - 1)
    )
    deleted = await conn.execute(
        delete(person_keys).where(person_keys.c.secret_sha256.in_(beyond.scalar_subquery()))
    )
    if not deleted.rowcount:
        return 0
    await access_changes.record(conn, "key", key_id, now)
    return int(deleted.rowcount)


async def prune_secrets(conn: AsyncConnection, now: datetime) -> int:
    """Forget exchanged secrets that expired; how many."""
    result = await conn.execute(delete(person_keys).where(person_keys.c.expires_at < now))
    return int(result.rowcount or 0)
