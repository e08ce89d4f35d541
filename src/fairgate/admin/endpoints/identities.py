"""People who call with an access token (``jwt:``): list, revoke, restore (proxy admins only).

``GET /admin/identities``, ``POST /admin/identities/revoke`` and
``POST /admin/identities/restore`` with ``{"issuer": …, "subject": …}``. A revocation
refuses that person on every replica within the access-change interval, whatever tokens
(and exchanged keys) they hold; somebody not seen yet can be revoked ahead.

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)
"""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from fairgate.admin.endpoints.context import Caller, listing
from fairgate.tenancy import Tenancy

__all__ = ["PersonBody", "identities_router"]


class PersonBody(BaseModel):
    """A person as their provider names them: the token's ``iss`` (whole) and ``sub``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: Annotated[
        StrictStr,
        Field(min_length=1, max_length=1000, examples=["https://sso.example.org/realms/r"]),
    ]
    subject: Annotated[StrictStr, Field(min_length=1, max_length=1024, examples=["f:1234:ada"])]


def identities_router(t: Tenancy) -> APIRouter:
    router = APIRouter(prefix="/admin/identities", tags=["identities"])

    @router.get("", summary="People known by an access token (proxy administrators)")
    async def list_people(
        actor: Caller,
        revoked: Annotated[bool, Query(description="only the revoked")] = False,
        issuer: Annotated[str | None, Query(max_length=1000)] = None,
    ) -> dict[str, Any]:
        return listing(await t.people.list(actor, revoked_only=revoked, issuer=issuer))

    @router.post("/revoke", summary="Refuse a person from now on, on every replica")
    async def revoke(body: PersonBody, actor: Caller) -> dict[str, Any]:
        key_id = await t.people.revoke(actor, issuer=body.issuer, subject=body.subject)
        return {"key_id": key_id, "issuer": body.issuer, "subject": body.subject, "revoked": True}

    @router.post("/restore", summary="Lift a person's revocation")
    async def restore(body: PersonBody, actor: Caller) -> dict[str, Any]:
        key_id = await t.people.restore(actor, issuer=body.issuer, subject=body.subject)
        return {"key_id": key_id, "issuer": body.issuer, "subject": body.subject, "revoked": False}

    return router
