"""Teams: created under an organisation by its admins (or declared in the configuration).

A team's model allowlist (None: every model; empty: none), its per-key limits
(each key's default and ceiling), its totals (all its keys together) and its
``max_keys_per_member`` are set by its organisation's admins, not by the team's
own admins, who narrow individual keys instead. A declared team cannot be
disabled here, and a name the configuration declares (under any organisation)
cannot be taken here: the configuration reserves it, even before the start-up
sync creates the team.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.core.clock import Clock
from fairgate.store import Store, StoreConflict, orgs, teams
from fairgate.store.teams import Team
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.base import Service
from fairgate.tenancy.errors import BadRequest, Conflict, Forbidden, NotFound
from fairgate.tenancy.limits import DEFAULT_KEYS_PER_MEMBER, Limits, check_keys_per_member
from fairgate.tenancy.names import check_name
from fairgate.tenancy.scope import Scope

__all__ = ["UNSET", "Teams"]

UNSET: Any = object()
"""A field left out of an update (as opposed to None, which clears it)."""


class Teams(Service):
    """List, create, change and disable teams, each within the actor's scope.

    Errors: NotFound for an organisation or team the actor cannot see,
    Forbidden for one it sees but may not change, Conflict for a taken name or one
    ``reserved`` (declared in the configuration), BadRequest for an invalid name, limit
    or model.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        models: Collection[str] | None = None,
        reserved: Collection[str] = (),
    ) -> None:
        super().__init__(store, clock, models=models)
        self._reserved = frozenset(reserved)

    async def list(self, actor: Actor, *, org: str | None = None) -> Sequence[Team]:
        async with self._store.read() as conn:
            return await teams.list_teams(conn, self._scope(actor).teams_read(), org=org)

    async def get(self, actor: Actor, name: str) -> Team:
        async with self._store.read() as conn:
            team = await teams.by_name(conn, name, self._scope(actor).teams_read())
        if team is None:
            raise NotFound(f"no team {name!r}", code="team_not_found")
        return team

    async def create(
        self,
        actor: Actor,
        *,
        org: str,
        name: str,
        models: Collection[str] | None = None,
        limits: Limits | None = None,
        totals: Limits | None = None,
        max_keys_per_member: int = DEFAULT_KEYS_PER_MEMBER,
    ) -> Team:
        check_name("team", name)
        model_list = self._check_models(models)
        check_keys_per_member(max_keys_per_member)
        scope = self._scope(actor)
        now = self._now()
        try:
            async with self._store.write() as conn:
                owner = await orgs.by_name(conn, org, scope.orgs_read())
                if owner is None:
                    raise NotFound(f"no organisation {org!r}", code="org_not_found")
                if not (actor.root_admin or owner.id in actor.admin_orgs):
                    raise Forbidden(
                        f"creating teams in {org!r} needs org_admin on it", code="forbidden"
                    )
                if owner.disabled_at is not None:
                    raise BadRequest(f"organisation {org!r} is disabled", code="org_disabled")
                if name in self._reserved:
                    # Which organisation declares it is not the caller's business.
                    raise Conflict(
                        f"team name {name!r} is reserved by the configuration",
                        code="team_name_reserved",
                    )
                team = await teams.insert_team(
                    conn,
                    org_id=owner.id,
                    name=name,
                    declared=False,
                    now=now,
                    models=model_list,
                    limits={
                        **(limits or Limits()).columns(),
                        **(totals or Limits()).columns("total_"),
                        "max_keys_per_member": max_keys_per_member,
                    },
                )
                await self._audit(
                    conn,
                    actor,
                    "team.created",
                    now,
                    target=f"team:{name}",
                    org_id=owner.id,
                    team_id=team.id,
                    detail={"models": None if model_list is None else list(model_list)},
                )
        except StoreConflict:
            raise Conflict(f"team {name!r} exists", code="team_exists") from None
        return team

    async def update(
        self,
        actor: Actor,
        name: str,
        *,
        models: Collection[str] | None = UNSET,
        limits: Limits | None = UNSET,
        totals: Limits | None = UNSET,
        max_keys_per_member: int = UNSET,
    ) -> Team:
        """Set the team's allowlist, per-key limits, totals or keys per member (UNSET
        leaves one as it is). Lowering a per-key limit binds the keys set above it at
        once: a key's effective limit is the smaller of its own and the team's."""
        values: dict[str, Any] = {}
        if models is not UNSET:
            values["models"] = self._check_models(models)
        if limits is not UNSET:
            values.update((limits or Limits()).columns())
        if totals is not UNSET:
            values.update((totals or Limits()).columns("total_"))
        if max_keys_per_member is not UNSET:
            values["max_keys_per_member"] = check_keys_per_member(max_keys_per_member)
        if not values:
            return await self.get(actor, name)
        scope = self._scope(actor)
        now = self._now()
        async with self._store.write() as conn:
            team = await teams.update_team(conn, name, values, now, scope.teams_manage())
            if team is None:
                await self._refuse(conn, scope, name)
                raise AssertionError("unreachable")
            await self._audit(
                conn,
                actor,
                "team.updated",
                now,
                target=f"team:{name}",
                org_id=team.org_id,
                team_id=team.id,
                detail=_jsonable(values),
            )
        return team

    async def disable(self, actor: Actor, name: str) -> Team:
        scope = self._scope(actor)
        now = self._now()
        async with self._store.write() as conn:
            visible = await teams.by_name(conn, name, scope.teams_read())
            if visible is None:
                raise NotFound(f"no team {name!r}", code="team_not_found")
            if visible.declared:
                raise BadRequest(
                    f"team {name!r} is declared in the configuration: remove it there",
                    code="declared_in_config",
                )
            team = await teams.set_disabled(conn, name, now, now, scope.teams_manage())
            if team is None:
                if visible.disabled_at is not None and await teams.by_name(
                    conn, name, scope.teams_manage()
                ):
                    return visible
                raise Forbidden(f"disabling team {name!r} needs org_admin", code="forbidden")
            await self._audit(
                conn,
                actor,
                "team.disabled",
                now,
                target=f"team:{name}",
                org_id=team.org_id,
                team_id=team.id,
            )
        return team

    async def _refuse(self, conn: AsyncConnection, scope: Scope, name: str) -> None:
        if await teams.by_name(conn, name, scope.teams_read()) is None:
            raise NotFound(f"no team {name!r}", code="team_not_found")
        raise Forbidden(f"changing team {name!r} needs org_admin", code="forbidden")


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
