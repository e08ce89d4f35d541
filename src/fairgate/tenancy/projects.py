"""Projects: named groups of keys inside a team, managed by the team's admins.

Disabling a project revokes its keys (in the same transaction, each with its
``key.revoked`` event) and keeps the project for reports; its name stays taken.
"""

from __future__ import annotations

from collections.abc import Sequence

from fairgate.store import StoreConflict, projects, teams
from fairgate.store.projects import Project
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.base import Service
from fairgate.tenancy.errors import BadRequest, Conflict, Forbidden, NotFound
from fairgate.tenancy.names import check_name

__all__ = ["Projects"]


class Projects(Service):
    """List, create and disable the projects of teams in the actor's scope.

    Errors: NotFound for a team or project the actor cannot see, Forbidden when
    it sees the team but does not administer it, Conflict for a taken name.
    """

    async def list(self, actor: Actor, *, team: str | None = None) -> Sequence[Project]:
        async with self._store.read() as conn:
            return await projects.list_projects(conn, self._scope(actor).projects_read(), team=team)

    async def create(self, actor: Actor, *, team: str, name: str) -> Project:
        check_name("project", name)
        scope = self._scope(actor)
        now = self._now()
        try:
            async with self._store.write() as conn:
                owner = await teams.by_name(conn, team, scope.teams_read())
                if owner is None:
                    raise NotFound(f"no team {team!r}", code="team_not_found")
                if await teams.by_name(conn, team, scope.teams_admin()) is None:
                    raise Forbidden(
                        f"creating projects in {team!r} needs team_admin", code="forbidden"
                    )
                if owner.disabled_at is not None:
                    raise BadRequest(f"team {team!r} is disabled", code="team_disabled")
                project = await projects.insert_project(conn, team_id=owner.id, name=name, now=now)
                await self._audit(
                    conn,
                    actor,
                    "project.created",
                    now,
                    target=f"project:{team}/{name}",
                    org_id=owner.org_id,
                    team_id=owner.id,
                )
        except StoreConflict:
            raise Conflict(f"project {team}/{name} exists", code="project_exists") from None
        return project

    async def disable(self, actor: Actor, *, team: str, name: str) -> Project:
        scope = self._scope(actor)
        now = self._now()
        async with self._store.write() as conn:
            visible = await projects.by_name(conn, team, name, scope.projects_read())
            if visible is None:
                raise NotFound(f"no project {team}/{name}", code="project_not_found")
            changed = await projects.disable(
                conn, visible.team_id, name, now, scope.projects_write()
            )
            if changed is None:
                if visible.disabled_at is not None and await projects.by_name(
                    conn, team, name, scope.projects_write()
                ):
                    return visible
                raise Forbidden(f"disabling {team}/{name} needs team_admin", code="forbidden")
            owner = await teams.by_id(conn, visible.team_id)
            org_id = owner.org_id if owner else None
            await self._audit(
                conn,
                actor,
                "project.disabled",
                now,
                target=f"project:{team}/{name}",
                org_id=org_id,
                team_id=visible.team_id,
            )
            _, revoked = changed
            for key_id in revoked:  # each a revocation, found like one made on its own
                await self._audit(
                    conn,
                    actor,
                    "key.revoked",
                    now,
                    target=f"key:{key_id}",
                    org_id=org_id,
                    team_id=visible.team_id,
                    detail={"project": f"{team}/{name}"},
                )
            project = await projects.by_name(conn, team, name)
        assert project is not None
        return project
