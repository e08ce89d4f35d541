"""Virtual keys: ``/admin/keys`` (the secret only in the answers to create and rotate;
created with ``"claim": true``, a one-time link instead of the secret).

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)
"""

from typing import Annotated, Any

from fastapi import APIRouter, Query

from fairgate.admin.bodies import KeyBody, KeyChange, RotateBody, seconds
from fairgate.admin.endpoints.context import Caller, listing
from fairgate.tenancy import Limits, Tenancy, public
from fairgate.tenancy.claims import DEFAULT_CLAIM_LIFETIME
from fairgate.tenancy.keys import PAGE

__all__ = ["keys_router"]

_LIMITS = ("rpm", "tpm", "rpd", "max_in_flight")


def keys_router(t: Tenancy) -> APIRouter:
    router = APIRouter(prefix="/admin/keys", tags=["keys"])

    @router.get(
        "",
        summary="Keys the caller may see (no secrets)",
        description=(
            "In id order, at most limit keys; page on with after = the last id of the page "
            "before (an empty page: no more)."
        ),
    )
    async def list_keys(
        actor: Caller,
        team: str | None = None,
        include_revoked: bool = True,
        after: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=PAGE)] = PAGE,
    ) -> dict[str, Any]:
        found = await t.keys.list(
            actor, team=team, include_revoked=include_revoked, after=after, limit=limit
        )
        return listing(found)

    @router.post(
        "",
        status_code=201,
        summary="Create a key; the secret is in this answer only (or, with claim, a link)",
    )
    async def create_key(body: KeyBody, actor: Caller) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "project": body.project,
            "name": body.name,
            "models": body.models,
            "tags": body.tags,
            "limits": body.limits(),
        }
        lifetime = seconds("expires_in", body.expires_in)
        if body.claim:
            link = seconds("claim_expires_in", body.claim_expires_in)
            made = await t.claims.create(
                actor,
                team=body.team,
                expires_in=DEFAULT_CLAIM_LIFETIME if link is None else link,
                key_expires_in=lifetime,
                **fields,
            )
            return public(made)
        return public(await t.keys.create(actor, team=body.team, expires_in=lifetime, **fields))

    @router.get("/{key_id}", summary="One key (no secret)")
    async def get_key(key_id: str, actor: Caller) -> dict[str, Any]:
        return public(await t.keys.get(actor, key_id))

    @router.patch("/{key_id}", summary="Change a live key's models, tags, limits or expiry")
    async def change_key(key_id: str, body: KeyChange, actor: Caller) -> dict[str, Any]:
        given = body.model_fields_set
        changes: dict[str, Any] = {}
        if "models" in given:
            changes["models"] = body.models
        if "tags" in given:
            changes["tags"] = body.tags
        if "expires_in" in given:
            changes["expires_in"] = seconds("expires_in", body.expires_in)
        if given & set(_LIMITS):
            current = await t.keys.get(actor, key_id)
            values = {f: getattr(body if f in given else current, f) for f in _LIMITS}
            changes["limits"] = Limits(**values)
        return public(await t.keys.update(actor, key_id, **changes))

    @router.delete("/{key_id}", summary="Revoke a key (at once; the record stays)")
    async def revoke_key(key_id: str, actor: Caller) -> dict[str, Any]:
        return public(await t.keys.revoke(actor, key_id))

    @router.post("/{key_id}/rotate", summary="New secret, same key; the old one valid for a grace")
    async def rotate_key(
        key_id: str, actor: Caller, body: RotateBody | None = None
    ) -> dict[str, Any]:
        grace = seconds("grace_period", (body or RotateBody()).grace_period) or 0.0
        return public(await t.keys.rotate(actor, key_id, grace=grace))

    return router
