"""The tree: ``/admin/orgs``, ``/admin/teams`` and ``/admin/teams/{team}/projects``.

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)
"""

from typing import Any

from fastapi import APIRouter

from fairgate.admin.bodies import NameBody, ProjectBody, TeamBody, TeamChange
from fairgate.admin.endpoints.context import Caller, listing
from fairgate.tenancy import Limits, Tenancy, public

__all__ = ["tree_router"]

_LIMITS = ("rpm", "tpm", "rpd", "max_in_flight")
_TOTALS = ("total_rpm", "total_tpm", "total_rpd", "total_max_in_flight")


def tree_router(t: Tenancy) -> APIRouter:
    router = APIRouter(prefix="/admin", tags=["tree"])

    @router.get("/orgs", summary="Organisations the caller may see")
    async def list_orgs(actor: Caller) -> dict[str, Any]:
        return listing(await t.orgs.list(actor))

    @router.post("/orgs", status_code=201, summary="Create an organisation (no share: it borrows)")
    async def create_org(body: NameBody, actor: Caller) -> dict[str, Any]:
        return public(await t.orgs.create(actor, body.name))

    @router.delete("/orgs/{name}", summary="Disable an organisation not declared in the config")
    async def disable_org(name: str, actor: Caller) -> dict[str, Any]:
        return public(await t.orgs.disable(actor, name))

    @router.get("/teams", summary="Teams the caller may see, optionally of one organisation")
    async def list_teams(actor: Caller, org: str | None = None) -> dict[str, Any]:
        return listing(await t.teams.list(actor, org=org))

    @router.post("/teams", status_code=201, summary="Create a team in an organisation")
    async def create_team(body: TeamBody, actor: Caller) -> dict[str, Any]:
        team = await t.teams.create(
            actor,
            org=body.org,
            name=body.name,
            models=body.models,
            limits=body.limits(),
            totals=body.totals(),
            max_keys_per_member=body.max_keys_per_member,
        )
        return public(team)

    @router.get("/teams/{name}", summary="One team")
    async def get_team(name: str, actor: Caller) -> dict[str, Any]:
        return public(await t.teams.get(actor, name))

    @router.patch("/teams/{name}", summary="Change a team's models, limits or keys per member")
    async def change_team(name: str, body: TeamChange, actor: Caller) -> dict[str, Any]:
        given = body.model_fields_set
        changes: dict[str, Any] = {}
        if "models" in given:
            changes["models"] = body.models
        if given & set(_LIMITS):
            current = await t.teams.get(actor, name)
            values = {f: getattr(body if f in given else current, f) for f in _LIMITS}
            changes["limits"] = Limits(**values)
        if given & set(_TOTALS):
            current = await t.teams.get(actor, name)
            totals = {f: getattr(body if f in given else current, f) for f in _TOTALS}
            changes["totals"] = Limits(**{f.removeprefix("total_"): v for f, v in totals.items()})
        if "max_keys_per_member" in given:
            changes["max_keys_per_member"] = body.max_keys_per_member
        return public(await t.teams.update(actor, name, **changes))

    @router.delete("/teams/{name}", summary="Disable a team not declared in the config")
    async def disable_team(name: str, actor: Caller) -> dict[str, Any]:
        return public(await t.teams.disable(actor, name))

    @router.get("/teams/{team}/projects", summary="Projects of a team")
    async def list_projects(team: str, actor: Caller) -> dict[str, Any]:
        await t.teams.get(actor, team)  # 404 for a team the caller cannot see
        return listing(await t.projects.list(actor, team=team))

    @router.post("/teams/{team}/projects", status_code=201, summary="Create a project")
    async def create_project(team: str, body: ProjectBody, actor: Caller) -> dict[str, Any]:
        return public(await t.projects.create(actor, team=team, name=body.name))

    @router.delete("/teams/{team}/projects/{name}", summary="Disable a project, revoking its keys")
    async def disable_project(team: str, name: str, actor: Caller) -> dict[str, Any]:
        return public(await t.projects.disable(actor, team=team, name=name))

    return router
