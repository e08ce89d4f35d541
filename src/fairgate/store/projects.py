"""Projects: named groups of keys inside one team (``team/project``), disabled, never deleted.

Functions run in the caller's transaction and take the scope ``where`` clause
built by the tenancy layer (see ``fairgate.store.orgs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, insert, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store import access_changes
from fairgate.store.tables import keys, projects, teams

__all__ = ["Project", "by_name", "disable", "insert_project", "list_projects"]


@dataclass(frozen=True, slots=True)
class Project:
    id: int
    team_id: int
    team: str
    name: str
    created_at: datetime
    disabled_at: datetime | None


_QUERY = select(
    projects.c.id,
    projects.c.team_id,
    teams.c.name.label("team"),
    projects.c.name,
    projects.c.created_at,
    projects.c.disabled_at,
).join_from(projects, teams, projects.c.team_id == teams.c.id)


async def insert_project(
    conn: AsyncConnection, *, team_id: int, name: str, now: datetime
) -> Project:
    project_id = (
        await conn.execute(
            insert(projects)
            .values(team_id=team_id, name=name, created_at=now)
            .returning(projects.c.id)
        )
    ).scalar_one()
    row = (await conn.execute(_QUERY.where(projects.c.id == project_id))).one()
    return Project(**row._mapping)


async def list_projects(
    conn: AsyncConnection, where: ColumnElement[bool] | None = None, *, team: str | None = None
) -> list[Project]:
    query = _QUERY.where(where if where is not None else true()).order_by(
        teams.c.name, projects.c.name
    )
    if team is not None:
        query = query.where(teams.c.name == team)
    return [Project(**row._mapping) for row in await conn.execute(query)]


async def by_name(
    conn: AsyncConnection, team: str, name: str, where: ColumnElement[bool] | None = None
) -> Project | None:
    query = _QUERY.where(
        teams.c.name == team, projects.c.name == name, where if where is not None else true()
    )
    row = (await conn.execute(query)).one_or_none()
    return None if row is None else Project(**row._mapping)


async def disable(
    conn: AsyncConnection,
    team_id: int,
    name: str,
    now: datetime,
    where: ColumnElement[bool] | None = None,
) -> tuple[int, list[str]] | None:
    """Disable a project and revoke its keys; the project's id and the ids of the keys
    revoked now (for their audit events), or None if no project in scope changed.

    The project goes into the access-change feed, so every key cache drops its keys.
    """
    project_id: int | None = (
        await conn.execute(
            update(projects)
            .where(
                projects.c.team_id == team_id,
                projects.c.name == name,
                projects.c.disabled_at.is_(None),
                where if where is not None else true(),
            )
            .values(disabled_at=now)
            .returning(projects.c.id)
        )
    ).scalar_one_or_none()
    if project_id is None:
        return None
    revoked = await conn.execute(
        update(keys)
        .where(keys.c.project_id == project_id, keys.c.revoked_at.is_(None))
        .values(revoked_at=now, changed_at=now)
        .returning(keys.c.id)
    )
    key_ids = sorted(revoked.scalars())
    team = (await conn.execute(select(teams.c.name).where(teams.c.id == team_id))).scalar_one()
    await access_changes.record(conn, "project", f"{team}/{name}", now)
    return project_id, key_ids
