"""The audit trail over the admin API: ``GET /admin/audit``, filtered to the caller's scope.

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)
"""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from fairgate.admin.endpoints.context import Caller, listing
from fairgate.admin.params import Moment, RowId
from fairgate.tenancy import Tenancy

__all__ = ["audit_router"]


class AuditEventOut(BaseModel):
    """One audit event as the admin API lists it."""

    id: int = Field(description="Row id; pass the last one as before_id for the next page")
    seq: int = Field(description="Place in the hash chain (1, 2, 3 … without gaps)")
    at: str = Field(description="RFC 3339, UTC")
    actor: str = Field(description="Who acted: user:NAME, operator:LOGIN, master-key, system:…")
    action: str = Field(description="What was done: key.created, team.disabled, auth.failed …")
    target: str | None = Field(description="What it was done to, e.g. key:ID or team:NAME")
    remote: str | None = Field(description="The client address of the admin request, if any")
    detail: dict[str, Any] | None = Field(description="What changed, per action")
    hash: str = Field(description="The event's seal in the chain (SHA-256, hex)")


class AuditPage(BaseModel):
    """A page of audit events, newest first."""

    data: list[AuditEventOut]


def audit_router(t: Tenancy) -> APIRouter:
    router = APIRouter(prefix="/admin", tags=["audit"])

    @router.get(
        "/audit",
        response_model=AuditPage,
        summary="Audit events the caller may see, newest first",
        description=(
            "A proxy admin or viewer sees every event, an organisation admin or viewer the "
            "events of their organisation, a team admin or viewer those of their team. "
            "Page back with before_id = the last id of the page before."
        ),
    )
    async def audit(
        caller: Caller,
        since: Moment = None,
        actor: Annotated[str | None, Query(max_length=200)] = None,
        action: Annotated[str | None, Query(max_length=64)] = None,
        before_id: RowId = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        events = await t.audit.list(
            caller,
            since=since,
            actor_name=actor,
            action=action,
            before_id=before_id,
            limit=limit,
        )
        return listing(events)

    return router
