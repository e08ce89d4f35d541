"""Virtual keys as listed and changed by administrators: never a secret, never a digest here.

The lookup by digest on the request path is ``fairgate.store.key_directory``.
Functions run in the caller's transaction and take the scope ``where`` clause
built by the tenancy layer, applied in the UPDATE itself (see ``fairgate.store.orgs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, func, insert, or_, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store import access_changes
from fairgate.store.tables import keys, orgs, projects, teams, users

__all__ = [
    "Key",
    "NewKeyRow",
    "get_key",
    "insert_key",
    "list_keys",
    "live_keys_owned",
    "revoke",
    "rotate",
    "update_key",
]


@dataclass(frozen=True, slots=True)
class Key:
    """A key as an administrator sees it: ``prefix`` identifies it, the secret is gone."""

    id: str
    prefix: str
    name: str | None
    org: str
    team_id: int
    team: str
    project: str | None
    owner: str | None
    models: tuple[str, ...] | None
    tags: tuple[str, ...]
    rpm: int | None
    tpm: int | None
    rpd: int | None
    max_in_flight: int | None
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    previous_until: datetime | None


@dataclass(frozen=True, slots=True)
class NewKeyRow:
    """What a new key is stored with (the digest of its secret, not the secret)."""

    id: str
    team_id: int
    project_id: int | None
    owner_id: int | None
    name: str | None
    prefix: str
    secret_sha256: bytes
    models: tuple[str, ...] | None
    tags: tuple[str, ...]
    limits: Mapping[str, int | None]
    created_by: str
    expires_at: datetime | None


_QUERY: Select[Any] = (
    select(
        keys.c.id,
        keys.c.prefix,
        keys.c.name,
        orgs.c.name.label("org"),
        keys.c.team_id,
        teams.c.name.label("team"),
        projects.c.name.label("project"),
        users.c.name.label("owner"),
        keys.c.models,
        keys.c.tags,
        keys.c.rpm,
        keys.c.tpm,
        keys.c.rpd,
        keys.c.max_in_flight,
        keys.c.created_at,
        keys.c.created_by,
        keys.c.expires_at,
        keys.c.revoked_at,
        keys.c.previous_until,
    )
    .join_from(keys, teams, keys.c.team_id == teams.c.id)
    .join(orgs, teams.c.org_id == orgs.c.id)
    .outerjoin(projects, keys.c.project_id == projects.c.id)
    .outerjoin(users, keys.c.owner_id == users.c.id)
)


def _key(mapping: Mapping[str, Any]) -> Key:
    values = dict(mapping)
    values["models"] = None if values["models"] is None else tuple(values["models"])
    values["tags"] = tuple(values["tags"] or ())
    return Key(**values)


async def insert_key(conn: AsyncConnection, new: NewKeyRow, now: datetime) -> Key:
    await conn.execute(
        insert(keys).values(
            id=new.id,
            team_id=new.team_id,
            project_id=new.project_id,
            owner_id=new.owner_id,
            name=new.name,
            prefix=new.prefix,
            secret_sha256=new.secret_sha256,
            models=None if new.models is None else list(new.models),
            tags=list(new.tags),
            created_at=now,
            created_by=new.created_by,
            expires_at=new.expires_at,
            changed_at=now,
            **new.limits,
        )
    )
    key = await get_key(conn, new.id)
    assert key is not None
    return key


async def live_keys_owned(conn: AsyncConnection, team_id: int, owner_id: int, now: datetime) -> int:
    """How many keys of the team ``owner_id`` owns that are neither revoked nor expired."""
    query = select(func.count()).where(
        keys.c.team_id == team_id,
        keys.c.owner_id == owner_id,
        keys.c.revoked_at.is_(None),
        or_(keys.c.expires_at.is_(None), keys.c.expires_at > now),
    )
    return int((await conn.execute(query)).scalar_one())


async def expired_owner(conn: AsyncConnection, key_id: str, now: datetime) -> int | None:
    """The owner of key ``key_id`` when it is expired and not revoked (None otherwise, or
    when it has no owner): a new expiry would bring it back among the owner's live keys."""
    query = select(keys.c.owner_id).where(
        keys.c.id == key_id,
        keys.c.revoked_at.is_(None),
        keys.c.expires_at.is_not(None),
        keys.c.expires_at <= now,
    )
    owner: int | None = (await conn.execute(query)).scalar_one_or_none()
    return owner


async def list_keys(
    conn: AsyncConnection,
    where: ColumnElement[bool] | None = None,
    *,
    team: str | None = None,
    include_revoked: bool = True,
    after: str | None = None,
    limit: int | None = 1000,
) -> list[Key]:
    """Keys in ``where`` in id order: at most ``limit`` (None: every one), those with an
    id above ``after`` (the last of the page before)."""
    query = _QUERY.where(where if where is not None else true())
    if team is not None:
        query = query.where(teams.c.name == team)
    if not include_revoked:
        query = query.where(keys.c.revoked_at.is_(None))
    if after is not None:
        query = query.where(keys.c.id > after)
    query = query.order_by(keys.c.id).limit(limit)
    return [_key(row._mapping) for row in await conn.execute(query)]


async def get_key(
    conn: AsyncConnection, key_id: str, where: ColumnElement[bool] | None = None
) -> Key | None:
    query = _QUERY.where(keys.c.id == key_id, where if where is not None else true())
    row = (await conn.execute(query)).one_or_none()
    return None if row is None else _key(row._mapping)


async def revoke(
    conn: AsyncConnection, key_id: str, now: datetime, where: ColumnElement[bool] | None = None
) -> bool:
    """Revoke a live key in scope; False when no such row changed."""
    changed = await conn.execute(
        update(keys)
        .where(
            keys.c.id == key_id, keys.c.revoked_at.is_(None), where if where is not None else true()
        )
        .values(revoked_at=now, changed_at=now)
        .returning(keys.c.id)
    )
    return await _changed(conn, changed.one_or_none() is not None, key_id, now)


async def rotate(
    conn: AsyncConnection,
    key_id: str,
    *,
    secret_sha256: bytes,
    prefix: str,
    previous_until: datetime | None,
    now: datetime,
    where: ColumnElement[bool] | None = None,
) -> bool:
    """Give a live key in scope a new secret; the old one stays valid until ``previous_until``.

    With ``previous_until`` None the old secret stops at once. A second rotation
    within a grace period ends the first one's grace: only one previous secret is kept.
    """
    grace = previous_until is not None
    changed = await conn.execute(
        update(keys)
        .where(
            keys.c.id == key_id, keys.c.revoked_at.is_(None), where if where is not None else true()
        )
        .values(
            previous_sha256=keys.c.secret_sha256 if grace else None,
            previous_until=previous_until,
            secret_sha256=secret_sha256,
            prefix=prefix,
            changed_at=now,
        )
        .returning(keys.c.id)
    )
    return await _changed(conn, changed.one_or_none() is not None, key_id, now)


async def update_key(
    conn: AsyncConnection,
    key_id: str,
    values: Mapping[str, Any],
    now: datetime,
    where: ColumnElement[bool] | None = None,
) -> bool:
    """Change a live key's models, limits, tags or expiry; False when no row in scope changed."""
    values = dict(values)
    for name in ("models", "tags"):
        if values.get(name) is not None:
            values[name] = list(values[name])
    changed = await conn.execute(
        update(keys)
        .where(
            keys.c.id == key_id, keys.c.revoked_at.is_(None), where if where is not None else true()
        )
        .values(**values, changed_at=now)
        .returning(keys.c.id)
    )
    return await _changed(conn, changed.one_or_none() is not None, key_id, now)


async def _changed(conn: AsyncConnection, changed: bool, key_id: str, now: datetime) -> bool:
    """``changed``, after putting a changed key in the access-change feed."""
    if changed:
        await access_changes.record(conn, "key", key_id, now)
    return changed
