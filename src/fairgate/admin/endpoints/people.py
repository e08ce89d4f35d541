"""Users, their role bindings and admin tokens; ``whoami``.

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)
"""

from typing import Any

from fastapi import APIRouter, Query, Response

from fairgate.admin.bodies import GrantBody, TokenBody, UserBody, seconds
from fairgate.admin.endpoints.context import Caller, listing
from fairgate.tenancy import Tenancy, public

__all__ = ["people_router"]


def people_router(t: Tenancy) -> APIRouter:
    router = APIRouter(prefix="/admin", tags=["users"])

    @router.get("/whoami", summary="The caller and the roles it holds")
    async def whoami(actor: Caller) -> dict[str, Any]:
        bindings = await t.roles.list(actor, user=actor.name.removeprefix("user:"))
        roles = (
            [{"role": "proxy_admin", "scope": None}]
            if actor.user_id is None
            else [
                {"role": b.role, "scope": None if b.scope is None else f"{b.scope_kind}:{b.scope}"}
                for b in bindings
            ]
        )
        return {"name": actor.name, "roles": roles}

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
