"""``GET /admin/spend``: the spend report, filtered to what the caller may see.

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)
"""

from typing import Annotated

from fastapi import APIRouter, Query, Response

from fairgate.accounting import MEDIA_TYPES, check_format, render, spend
from fairgate.admin.endpoints.context import Caller
from fairgate.store import Store

__all__ = ["spend_router"]

_DESCRIPTION = """\
Requests, prompt / completion / cached tokens, GPU-hours and estimated requests
of the usage records in `[from, to)` (UTC dates), grouped by any of `org`,
`team`, `project`, `key`, `model`, `pool`, `tag` (default `org,team`), as `json`,
`csv` or `parsable2` (pipe-delimited like Slurm's `sreport --parsable2`).
A record counts once under each of its tags. Filters (`org=`, `team=`, …) keep
the records whose value matches. Proxy admins and viewers see every record,
organisation admins and viewers their organisation's keys, team admins and
viewers their team's, members their own keys.
"""


def spend_router(store: Store) -> APIRouter:
    router = APIRouter(prefix="/admin", tags=["spend"])

    @router.get("/spend", summary="Spend report", description=_DESCRIPTION)
    async def spend_report(
        actor: Caller,
        from_: Annotated[str, Query(alias="from", description="First day, YYYY-MM-DD")],
        to: Annotated[str, Query(description="Day after the last, YYYY-MM-DD")],
        group_by: Annotated[str, Query(description="Comma-separated dimensions")] = "org,team",
        fmt: Annotated[str, Query(alias="format", description="json, csv or parsable2")] = "json",
        org: str | None = None,
        team: str | None = None,
        project: str | None = None,
        key: str | None = None,
        model: str | None = None,
        pool: str | None = None,
        tag: str | None = None,
    ) -> Response:
        filters = {
            "org": org,
            "team": team,
            "project": project,
            "key": key,
            "model": model,
            "pool": pool,
            "tag": tag,
        }
        check_format(fmt)
        report = await spend(store, actor, from_, to, group_by, filters=filters)
        return Response(render(report, fmt), media_type=MEDIA_TYPES[fmt])

    return router
