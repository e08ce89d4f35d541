"""IP allowlists: ``GET /admin/allowlists`` and ``PUT /admin/allowlists``.

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)
"""

from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from fairgate.admin.endpoints.context import Caller, listing
from fairgate.core.address_lists import MAX_CIDRS
from fairgate.tenancy import Tenancy

__all__ = ["AllowlistBody", "allowlists_router"]


class AllowlistBody(BaseModel):
    """The list of one organisation, team (by name) or key (by id); ``cidrs`` [] removes it.

    Entries are networks (``10.0.0.0/8``, ``2001:db8::/32``) or single addresses;
    one with bits set beyond its prefix (``10.0.0.5/8``) is refused, named.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["org", "team", "key"]
    name: Annotated[StrictStr, Field(min_length=1, max_length=128)]
    cidrs: Annotated[
        list[Annotated[StrictStr, Field(max_length=64)]],
        Field(max_length=MAX_CIDRS, examples=[["10.0.0.0/8", "2001:db8::/32"]]),
    ]


def allowlists_router(t: Tenancy) -> APIRouter:
    router = APIRouter(prefix="/admin/allowlists", tags=["allowlists"])

    @router.get("", summary="IP allowlists the caller may see")
    async def list_allowlists(actor: Caller) -> dict[str, Any]:
        return listing(await t.allowlists.list(actor))

    @router.put("", summary="Set (or, with no networks, remove) one IP allowlist")
    async def set_allowlist(body: AllowlistBody, actor: Caller) -> dict[str, Any]:
        cidrs = await t.allowlists.set(actor, body.kind, body.name, body.cidrs)
        return {"kind": body.kind, "name": body.name, "cidrs": list(cidrs)}

    return router
