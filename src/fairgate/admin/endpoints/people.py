"""Users, their role bindings and admin tokens; ``whoami``.

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)
"""

from typing import Any

from fastapi import APIRouter, Query, Response

from fairgate.admin.bodies import GrantBody, TokenBody, UserBody, seconds
from fairgate.admin.endpoints.context import Caller, listing
from fairgate.tenancy import Actor, Tenancy, public

__all__ = ["people_router"]


def people_router(t: Tenancy) -> APIRouter:
    router = APIRouter(prefix="/admin", tags=["users"])

    @router.get("/whoami", summary="The caller and the roles it holds")
    async def whoami(actor: Caller) -> dict[str, Any]:
        return {"name": actor.name, "roles": await _held(t, actor)}

    @router.get("/users", summary="Users the caller may see")
    async def list_users(actor: Caller) -> dict[str, Any]:
        return listing(await t.users.list(actor))

    @router.post("/users", status_code=201, summary="Create a user")
    async def create_user(body: UserBody, actor: Caller) -> dict[str, Any]:
        return public(await t.users.create(actor, body.name, org=body.org))

    @router.delete("/users/{name}", summary="Disable a user, revoking their admin tokens")
    async def disable_user(name: str, actor: Caller) -> dict[str, Any]:
        return public(await t.users.disable(actor, name))

    @router.post("/users/{name}/enable", summary="Enable a disabled user (without its old tokens)")
    async def enable_user(name: str, actor: Caller) -> dict[str, Any]:
        return public(await t.users.enable(actor, name))

    @router.get("/users/{name}/roles", summary="A user's role bindings the caller may see")
    async def list_roles(name: str, actor: Caller) -> dict[str, Any]:
        return listing(await t.roles.list(actor, user=name))

    @router.post("/users/{name}/roles", status_code=201, summary="Grant a role")
    async def grant(name: str, body: GrantBody, actor: Caller) -> dict[str, Any]:
        binding = await t.roles.grant(
            actor, user=name, role=body.role, org=body.org, team=body.team
        )
        return public(binding)

    @router.delete("/users/{name}/roles", status_code=204, summary="Remove a role binding")
    async def revoke_role(
        name: str,
        actor: Caller,
        role: str = Query(),
        org: str | None = None,
        team: str | None = None,
    ) -> Response:
        await t.roles.revoke(actor, user=name, role=role, org=org, team=team)
        return Response(status_code=204)

    @router.get("/admin-tokens", summary="Admin tokens: the caller's own (all for a proxy admin)")
    async def list_tokens(actor: Caller, user: str | None = None) -> dict[str, Any]:
        return listing(await t.admin_tokens.list(actor, user=user))

    @router.post("/admin-tokens", status_code=201, summary="Create an admin token, shown once")
    async def create_token(body: TokenBody, actor: Caller) -> dict[str, Any]:
        new = await t.admin_tokens.create(
            actor,
            user=body.user,
            name=body.name,
            expires_in=seconds("expires_in", body.expires_in),
        )
        return public(new)

    @router.delete("/admin-tokens/{token_id}", status_code=204, summary="Revoke an admin token")
    async def revoke_token(token_id: str, actor: Caller) -> Response:
        await t.admin_tokens.revoke(actor, token_id)
        return Response(status_code=204)

    return router


async def _held(t: Tenancy, actor: Actor) -> list[dict[str, Any]]:
    """The roles this request acts with, each with its scope as ``org:NAME`` or
    ``team:NAME`` (None for the root): the actor's own holdings, so an SSO session
    shows its claims' roles with its store ones and the master key its root role."""
    kinds = {h.scope_kind for h in actor.holds}
    names: dict[tuple[str, int], str] = {}
    if "org" in kinds:
        names.update((("org", o.id), o.name) for o in await t.orgs.list(actor))
    if "team" in kinds:
        names.update((("team", team.id), team.name) for team in await t.teams.list(actor))
    return [
        {
            "role": str(h.role),
            "scope": None
            if h.scope_kind == "root"
            else f"{h.scope_kind}:{names.get((h.scope_kind, h.scope_id), h.scope_id)}",
        }
        for h in actor.holds
    ]
