"""Teams: under one organisation, with an optional model allowlist, per-key limits
(defaults and ceilings of its keys), totals across its keys, and keys per member.

Functions run in the caller's transaction and take the scope ``where`` clause
built by the tenancy layer (see ``fairgate.store.orgs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, RowMapping, insert, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store import access_changes
from fairgate.store.tables import keys, orgs, teams

__all__ = [
    "Team",
    "by_id",
    "by_name",
    "insert_team",
    "list_teams",
    "lock",
    "set_disabled",
    "update_team",
]


@dataclass(frozen=True, slots=True)
class Team:
    """A team; ``models`` None = every model, () = none; limits None = unlimited.

    ``rpm`` … ``max_in_flight`` bind each key (a key may narrow them, never widen
    them); ``total_rpm`` … ``total_max_in_flight`` bind all its keys together;
    ``max_keys_per_member`` bounds the live keys one user owns in the team.
    """

    id: int
    org_id: int
    org: str
    name: str
    declared: bool
    from_config: bool  # created by the configuration sync, not through the admin API
    models: tuple[str, ...] | None
    rpm: int | None
    tpm: int | None
    rpd: int | None
    max_in_flight: int | None
    created_at: datetime
    disabled_at: datetime | None
    total_rpm: int | None
    total_tpm: int | None
    total_rpd: int | None
    total_max_in_flight: int | None
    max_keys_per_member: int


_QUERY = select(
    teams.c.id,
    teams.c.org_id,
    orgs.c.name.label("org"),
    teams.c.name,
    teams.c.declared,
    teams.c.from_config,
    teams.c.models,
    teams.c.rpm,
    teams.c.tpm,
    teams.c.rpd,
    teams.c.max_in_flight,
    teams.c.created_at,
    teams.c.disabled_at,
    teams.c.total_rpm,
    teams.c.total_tpm,
    teams.c.total_rpd,
    teams.c.total_max_in_flight,
    teams.c.max_keys_per_member,
).join_from(teams, orgs, teams.c.org_id == orgs.c.id)


def _team(mapping: RowMapping) -> Team:
    values = dict(mapping)
    models = values["models"]
    values["models"] = None if models is None else tuple(models)
    return Team(**values)


async def insert_team(
    conn: AsyncConnection,
    *,
    org_id: int,
    name: str,
    declared: bool,
    now: datetime,
    models: tuple[str, ...] | None = None,
    limits: Mapping[str, int | None] | None = None,
) -> Team:
    """A new team; one ``declared`` at insertion is marked created by the configuration."""
    values: dict[str, Any] = {
        "org_id": org_id,
        "name": name,
        "declared": declared,
        "from_config": declared,
        "created_at": now,
        "models": None if models is None else list(models),
        **(limits or {}),
    }
    team_id = (
        await conn.execute(insert(teams).values(**values).returning(teams.c.id))
    ).scalar_one()
    team = await by_id(conn, team_id)
    assert team is not None
    return team


async def list_teams(
    conn: AsyncConnection, where: ColumnElement[bool] | None = None, *, org: str | None = None
) -> list[Team]:
    query = _QUERY.where(where if where is not None else true()).order_by(teams.c.name)
    if org is not None:
        query = query.where(orgs.c.name == org)
    return [_team(row._mapping) for row in await conn.execute(query)]


async def by_name(
    conn: AsyncConnection, name: str, where: ColumnElement[bool] | None = None
) -> Team | None:
    query = _QUERY.where(teams.c.name == name, where if where is not None else true())
    row = (await conn.execute(query)).one_or_none()
    return None if row is None else _team(row._mapping)


async def by_id(conn: AsyncConnection, team_id: int) -> Team | None:
    row = (await conn.execute(_QUERY.where(teams.c.id == team_id))).one_or_none()
    return None if row is None else _team(row._mapping)


async def lock(conn: AsyncConnection, team_id: int) -> None:
    """Hold the team's row until the transaction ends, so that writers checking a count
    of its keys run one after the other: ``SELECT … FOR UPDATE`` on PostgreSQL; on
    SQLite every write transaction already holds the database's write lock."""
    await conn.execute(select(teams.c.id).where(teams.c.id == team_id).with_for_update())


async def update_team(
    conn: AsyncConnection,
    name: str,
    values: Mapping[str, Any],
    now: datetime,
    where: ColumnElement[bool] | None = None,
) -> Team | None:
    """Change a team's models or limits; None when no team in scope has that name.

    Its keys are marked changed and the team goes into the access-change feed: cached
    records carry the team's list and limits.
    """
    values = dict(values)
    if "models" in values and values["models"] is not None:
        values["models"] = list(values["models"])
    team_id = (
        await conn.execute(
            update(teams)
            .where(teams.c.name == name, where if where is not None else true())
            .values(**values)
            .returning(teams.c.id)
        )
    ).scalar_one_or_none()
    if team_id is None:
        return None
    await conn.execute(update(keys).where(keys.c.team_id == team_id).values(changed_at=now))
    team = await by_id(conn, team_id)
    assert team is not None
    await access_changes.record(conn, "team", team.name, now)
    return team


async def set_disabled(
    conn: AsyncConnection,
    name: str,
    disabled_at: datetime | None,
    now: datetime,
    where: ColumnElement[bool] | None = None,
) -> Team | None:
    """Disable (or, with None, enable) a team; None when no row in scope changed.

    The team goes into the access-change feed, so every key cache drops its keys.
    """
    state = teams.c.disabled_at.is_(None) if disabled_at else teams.c.disabled_at.is_not(None)
    team_id = (
        await conn.execute(
            update(teams)
            .where(teams.c.name == name, state, where if where is not None else true())
            .values(disabled_at=disabled_at)
            .returning(teams.c.id)
        )
    ).scalar_one_or_none()
    if team_id is None:
        return None
    await conn.execute(update(keys).where(keys.c.team_id == team_id).values(changed_at=now))
    team = await by_id(conn, team_id)
    assert team is not None
    await access_changes.record(conn, "team", team.name, now)
    return team
