"""The store side of ``fairgate.auth.KeyDirectory``: one indexed query per cache miss.

The query matches the digest against the current secret or the previous one (a
rotated key), whatever the key's state: authentication decides what a revoked,
expired or past-grace record means. A key whose project, team or organisation is
disabled is returned with ``revoked_at`` set to the earliest of those moments,
so it is refused like a revoked key without authentication knowing the tree.
The IP allowlists of the key, its team and its organisation come with the same
row (three outer joins on ``allowlists``), so a key is loaded with every list
that applies to it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import or_, select, update

from fairgate.core.limits import Limits
from fairgate.core.principal import KeyRecord
from fairgate.store.database import Store
from fairgate.store.tables import allowlists, keys, orgs, person_keys, projects, teams
from fairgate.store.timestamp import from_unix, to_unix

__all__ = ["StoreKeyDirectory"]

_KEY_LIST = allowlists.alias("key_list")
_TEAM_LIST = allowlists.alias("team_list")
_ORG_LIST = allowlists.alias("org_list")

_QUERY = (
    select(
        keys.c.id,
        keys.c.prefix,
        keys.c.secret_sha256,
        keys.c.previous_sha256,
        keys.c.previous_until,
        keys.c.models,
        keys.c.tags,
        keys.c.expires_at,
        keys.c.revoked_at,
        keys.c.rpm,
        keys.c.tpm,
        keys.c.rpd,
        keys.c.max_in_flight,
        teams.c.name.label("team"),
        teams.c.models.label("team_models"),
        teams.c.rpm.label("team_rpm"),
        teams.c.tpm.label("team_tpm"),
        teams.c.rpd.label("team_rpd"),
        teams.c.max_in_flight.label("team_max_in_flight"),
        teams.c.total_rpm,
        teams.c.total_tpm,
        teams.c.total_rpd,
        teams.c.total_max_in_flight,
        teams.c.disabled_at.label("team_disabled_at"),
        orgs.c.name.label("org"),
        orgs.c.disabled_at.label("org_disabled_at"),
        projects.c.name.label("project"),
        projects.c.disabled_at.label("project_disabled_at"),
        _KEY_LIST.c.cidrs.label("cidrs"),
        _TEAM_LIST.c.cidrs.label("team_cidrs"),
        _ORG_LIST.c.cidrs.label("org_cidrs"),
    )
    .join_from(keys, teams, keys.c.team_id == teams.c.id)
    .join(orgs, teams.c.org_id == orgs.c.id)
    .outerjoin(projects, keys.c.project_id == projects.c.id)
    .outerjoin(_KEY_LIST, _KEY_LIST.c.key_id == keys.c.id)
    .outerjoin(_TEAM_LIST, _TEAM_LIST.c.team_id == teams.c.id)
    .outerjoin(_ORG_LIST, _ORG_LIST.c.org_id == orgs.c.id)
)


class StoreKeyDirectory:
    """Implements ``fairgate.auth.KeyDirectory`` over a connected :class:`Store`.

    ``find_key`` returns the record matched by the current or the previous
    digest, or by their pre-pepper SHA-256 (``None`` when no key has it), with
    ``team_models``, ``org`` and the team's limits applied: a key's own limit
    bounded by its team's per-key limit (``Limits.within``), and the team's
    totals across its keys.
    ``key_changes(since)`` lists the ids of keys revoked, rotated or otherwise
    changed after ``since`` (Unix seconds), including those of a team or
    organisation disabled or edited since. Both raise ``StoreUnavailable`` when
    the database cannot answer, never ``None``; so does ``rehash``, which
    re-hashes a pre-pepper digest in place (``changed_at`` untouched: a re-hash
    withdraws nothing).
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    async def find_key(
        self, secret_sha256: bytes, now: float, legacy: bytes | None = None
    ) -> KeyRecord | None:
        digests = [secret_sha256] if legacy is None else [secret_sha256, legacy]
        query = _QUERY.where(
            or_(keys.c.secret_sha256.in_(digests), keys.c.previous_sha256.in_(digests))
        )
        async with self._store.read() as conn:
            row = (await conn.execute(query)).first()
            if row is not None:
                return _record(row)
            return await _exchanged(conn, digests)

    async def find_person(self, key_id: str) -> KeyRecord | None:
        """The record of key ``key_id`` (a person's synthetic key), or None."""
        async with self._store.read() as conn:
            row = (await conn.execute(_QUERY.where(keys.c.id == key_id))).first()
        return None if row is None else _record(row)

    async def rehash(self, key_id: str, old: bytes, new: bytes) -> None:
        async with self._store.write() as conn:
            for column in ("secret_sha256", "previous_sha256"):
                await conn.execute(
                    update(keys)
                    .where(keys.c.id == key_id, keys.c[column] == old)
                    .values({column: new})
                )

    async def key_changes(self, since: float) -> list[str]:
        query = select(keys.c.id).where(keys.c.changed_at > from_unix(since))
        async with self._store.read() as conn:
            return list((await conn.execute(query)).scalars())


async def _exchanged(conn: Any, digests: list[bytes]) -> KeyRecord | None:
    """The person's key an exchanged secret stands for, valid until the secret's expiry
    (``person_keys``; one key row, so one spend line, for every secret given)."""
    query = select(person_keys.c.secret_sha256, person_keys.c.key_id, person_keys.c.expires_at)
    found = (await conn.execute(query.where(person_keys.c.secret_sha256.in_(digests)))).first()
    if found is None:
        return None
    row = (await conn.execute(_QUERY.where(keys.c.id == found.key_id))).first()
    if row is None:
        return None
    record = _record(row)
    until = to_unix(found.expires_at)
    assert until is not None
    expiry = until if record.expires_at is None else min(until, record.expires_at)
    return replace(
        record,
        secret_sha256=bytes(found.secret_sha256),
        previous_sha256=None,
        previous_until=None,
        expires_at=expiry,
    )


def _record(row: Any) -> KeyRecord:
    own = Limits(row.rpm, row.tpm, row.rpd, row.max_in_flight)
    team = Limits(row.team_rpm, row.team_tpm, row.team_rpd, row.team_max_in_flight)
    limits = own.within(team)
    stops = [
        moment
        for moment in (
            row.revoked_at,
            row.project_disabled_at,
            row.team_disabled_at,
            row.org_disabled_at,
        )
        if moment is not None
    ]
    return KeyRecord(
        key_id=row.id,
        prefix=row.prefix,
        secret_sha256=bytes(row.secret_sha256),
        org=row.org,
        team=row.team,
        project=row.project,
        tags=tuple(row.tags or ()),
        models=None if row.models is None else tuple(row.models),
        team_models=None if row.team_models is None else tuple(row.team_models),
        expires_at=to_unix(row.expires_at),
        revoked_at=to_unix(min(stops)) if stops else None,
        previous_sha256=None if row.previous_sha256 is None else bytes(row.previous_sha256),
        previous_until=to_unix(row.previous_until),
        limits=limits,
        team_limits=Limits(row.total_rpm, row.total_tpm, row.total_rpd, row.total_max_in_flight),
        cidrs=_cidrs(row.cidrs),
        team_cidrs=_cidrs(row.team_cidrs),
        org_cidrs=_cidrs(row.org_cidrs),
    )


def _cidrs(stored: Any) -> tuple[str, ...] | None:
    return None if stored is None else tuple(stored)
