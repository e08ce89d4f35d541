"""Organisations: the configuration declares them (with their share); the admin API adds borrowers.

``sync`` runs at start-up with the configuration's ``orgs``: declared
organisations and their teams are created or re-enabled, shares updated;
organisations (and teams) no longer declared are disabled, never deleted, so
their keys stop working and their usage records stay readable. An organisation
created through the admin API has no share (it only borrows) and is left alone
by the sync.

A team the configuration declares under one organisation while the store holds
it under another moves only if the sync created it (``Team.from_config``): the
operator moved it in the file. A team created through the admin API is never
moved with its keys and role bindings into another organisation; the sync
raises :class:`ConfigConflict` naming both organisations and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store import StoreConflict, budgets, orgs, teams
from fairgate.store.orgs import Org
from fairgate.store.teams import Team
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.base import Service
from fairgate.tenancy.errors import BadRequest, ConfigConflict, Conflict, Forbidden, NotFound
from fairgate.tenancy.names import check_name

__all__ = ["DeclaredOrg", "Orgs", "SyncReport", "declared_teams"]


class DeclaredOrg(Protocol):
    """An organisation as the configuration declares it (``fairgate.config.Org``)."""

    @property
    def name(self) -> str: ...
    @property
    def share(self) -> float: ...
    @property
    def teams(self) -> tuple[str, ...]: ...


def declared_teams(declared: Sequence[DeclaredOrg]) -> frozenset[str]:
    """Every team name the configuration declares (reserved: the admin API cannot take one)."""
    return frozenset(team for org in declared for team in org.teams)


@dataclass(slots=True)
class SyncReport:
    """What a sync changed, by name: for the start-up log line."""

    created: list[str] = field(default_factory=list)
    enabled: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)


class Orgs(Service):
    """List, create and disable organisations; sync the declared ones.

    Creating and disabling need proxy_admin; a declared organisation cannot be
    disabled here (BadRequest: remove it from the configuration).
    """

    async def list(self, actor: Actor) -> Sequence[Org]:
        async with self._store.read() as conn:
            return await orgs.list_orgs(conn, self._scope(actor).orgs_read())

    async def get(self, actor: Actor, name: str) -> Org:
        async with self._store.read() as conn:
            org = await orgs.by_name(conn, name, self._scope(actor).orgs_read())
        if org is None:
            raise NotFound(f"no organisation {name!r}", code="org_not_found")
        return org

    async def create(self, actor: Actor, name: str) -> Org:
        check_name("organisation", name)
        if not actor.root_admin:
            raise Forbidden("only a proxy admin creates organisations", code="forbidden")
        now = self._now()
        try:
            async with self._store.write() as conn:
                org = await orgs.insert_org(conn, name=name, share=None, declared=False, now=now)
                await self._audit(
                    conn, actor, "org.created", now, target=f"org:{name}", org_id=org.id
                )
        except StoreConflict:
            raise Conflict(f"organisation {name!r} exists", code="org_exists") from None
        return org

    async def disable(self, actor: Actor, name: str) -> Org:
        scope = self._scope(actor)
        now = self._now()
        async with self._store.write() as conn:
            visible = await orgs.by_name(conn, name, scope.orgs_read())
            if visible is None:
                raise NotFound(f"no organisation {name!r}", code="org_not_found")
            if visible.declared:
                raise BadRequest(
                    f"organisation {name!r} is declared in the configuration: remove it there",
                    code="declared_in_config",
                )
            org = await orgs.set_disabled(conn, name, now, now, scope.orgs_write())
            if org is None:
                if visible.disabled_at is not None and actor.root_admin:
                    return visible
                raise Forbidden("only a proxy admin disables organisations", code="forbidden")
            await self._audit(conn, actor, "org.disabled", now, target=f"org:{name}", org_id=org.id)
        return org

    async def sync(self, declared: Sequence[DeclaredOrg]) -> SyncReport:
        """Make the store's organisations and teams match the configuration (one transaction).

        Raises ConfigConflict, changing nothing, when a declared team would have to be
        taken from another organisation (see the module's docstring).
        """
        actor = Actor.system("config")
        report = SyncReport()
        now = self._now()
        async with self._store.write(exclusive=True) as conn:  # workers start together
            _refuse_taken_teams(declared, await teams.list_teams(conn))
            wanted = {org.name: org for org in declared}
            for org in await orgs.list_orgs(conn):
                if org.declared and org.name not in wanted:
                    await orgs.set_declared(conn, org.id, share=org.share, declared=False)
                    if await orgs.set_disabled(conn, org.name, now, now):
                        report.disabled.append(f"org:{org.name}")
                        await self._audit(
                            conn,
                            actor,
                            "org.disabled",
                            now,
                            target=f"org:{org.name}",
                            org_id=org.id,
                        )
            team_owner = {team: org.name for org in declared for team in org.teams}
            for team in await teams.list_teams(conn):
                if team.declared and team.name not in team_owner:
                    await teams.update_team(conn, team.name, {"declared": False}, now)
                    if await teams.set_disabled(conn, team.name, now, now):
                        report.disabled.append(f"team:{team.name}")
                        await self._audit(
                            conn,
                            actor,
                            "team.disabled",
                            now,
                            target=f"team:{team.name}",
                            org_id=team.org_id,
                            team_id=team.id,
                        )
            for decl in declared:
                org_id = await self._sync_org(conn, actor, decl, now, report)
                for team_name in decl.teams:
                    await self._sync_team(conn, actor, org_id, team_name, now, report)
        return report

    async def _sync_org(
        self,
        conn: AsyncConnection,
        actor: Actor,
        decl: DeclaredOrg,
        now: datetime,
        report: SyncReport,
    ) -> int:
        org = await orgs.by_name(conn, decl.name)
        if org is None:
            org = await orgs.insert_org(
                conn, name=decl.name, share=decl.share, declared=True, now=now
            )
            report.created.append(f"org:{decl.name}")
            await self._audit(
                conn, actor, "org.created", now, target=f"org:{decl.name}", org_id=org.id
            )
            return org.id
        await orgs.set_declared(conn, org.id, share=decl.share, declared=True)
        if await orgs.set_disabled(conn, decl.name, None, now):
            report.enabled.append(f"org:{decl.name}")
            await self._audit(
                conn, actor, "org.enabled", now, target=f"org:{decl.name}", org_id=org.id
            )
        return org.id

    async def _sync_team(
        self,
        conn: AsyncConnection,
        actor: Actor,
        org_id: int,
        name: str,
        now: datetime,
        report: SyncReport,
    ) -> None:
        team = await teams.by_name(conn, name)
        if team is None:
            team = await teams.insert_team(conn, org_id=org_id, name=name, declared=True, now=now)
            report.created.append(f"team:{name}")
            await self._audit(
                conn,
                actor,
                "team.created",
                now,
                target=f"team:{name}",
                org_id=org_id,
                team_id=team.id,
            )
            return
        if team.org_id != org_id or not team.declared:
            await teams.update_team(conn, name, {"org_id": org_id, "declared": True}, now)
            if team.org_id != org_id:
                await budgets.move_team(conn, team.id, org_id)
                await self._audit(
                    conn,
                    actor,
                    "team.moved",
                    now,
                    target=f"team:{name}",
                    org_id=org_id,
                    team_id=team.id,
                    detail={"from_org_id": team.org_id},
                )
        if await teams.set_disabled(conn, name, None, now):
            report.enabled.append(f"team:{name}")
            await self._audit(
                conn,
                actor,
                "team.enabled",
                now,
                target=f"team:{name}",
                org_id=org_id,
                team_id=team.id,
            )


def _refuse_taken_teams(declared: Sequence[DeclaredOrg], stored: Sequence[Team]) -> None:
    """ConfigConflict for every declared team the store holds, created through the admin API,
    under another organisation."""
    by_name = {team.name: team for team in stored}
    conflicts = [
        (name, org.name, team.org)
        for org in declared
        for name in org.teams
        if (team := by_name.get(name)) is not None and team.org != org.name and not team.from_config
    ]
    if not conflicts:
        return
    lines = [
        f"team {name!r} is declared under organisation {wanted!r}, but the store holds a team "
        f"{name!r} of organisation {holder!r} that was created through the admin API or CLI; "
        f"it is not moved to {wanted!r} (its keys and role bindings belong to {holder!r})"
        for name, wanted, holder in conflicts
    ]
    raise ConfigConflict(
        "; ".join(lines)
        + ". Declare the team under another name in the configuration (or under the "
        "organisation that holds it).",
        code="declared_team_taken",
    )
