"""``GET /admin/dashboard`` and ``GET /admin/dashboard/live`` (the part that updates).

    router = dashboard_router(board, pages, tenancy, access)

Who may read it is decided as for ``GET /admin/fairshare``: proxy admins and
viewers see every organisation, organisation admins and viewers one row per
pool for each of their organisations, every other caller gets 403. The actor
is resolved on every request (:class:`~fairgate.admin.dashboard.access.Access`),
so a removed role binding applies to the very next update. Errors are HTML
pages with the right status; the reason is logged, never a secret.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from fairgate.admin.dashboard.access import Access
from fairgate.admin.dashboard.pages import Pages
from fairgate.admin.dashboard.view import Board
from fairgate.admin.fairshare import visible_orgs
from fairgate.core.errors import GatewayError, ServiceUnavailable, StoreUnavailable
from fairgate.tenancy import Tenancy

__all__ = ["dashboard_router", "error_page"]

log = logging.getLogger("fairgate.admin")


def error_page(pages: Pages, exc: GatewayError, *, signin: bool = False) -> Response:
    """``exc`` as an HTML page with its status (and Retry-After for a 429); ``signin``
    links a 401 to the sign-in form."""
    headers = {k.decode(): v.decode() for k, v in exc.headers()}
    return pages.render(
        "error.html",
        status=exc.status,
        headers=headers,
        title=_TITLES.get(exc.status, "Error"),
        message=exc.message,
        signin=signin and exc.status == 401,
    )


_TITLES = {
    401: "Sign-in needed",
    403: "Not yours to see",
    429: "Too many attempts",
    503: "Unavailable",
}


def dashboard_router(board: Board, pages: Pages, tenancy: Tenancy, access: Access) -> APIRouter:
    router = APIRouter(prefix="/admin", include_in_schema=False)

    async def render(request: Request, template: str) -> Response:
        try:
            caller = await access.caller(request)
            if caller is None:
                if template == "dashboard.html" and access.sign_in_enabled:
                    return RedirectResponse("/admin/signin", status_code=303)
                return error_page(pages, access.unauthenticated(), signin=access.sign_in_enabled)
            orgs = await visible_orgs(tenancy, caller.actor)
            view = await board.view(orgs)
        except GatewayError as exc:
            log.info("dashboard: %s refused: %s", request.url.path, exc.message)
            return error_page(pages, exc, signin=access.sign_in_enabled)
        except StoreUnavailable as exc:
            log.error("dashboard: the store is unavailable: %s", exc)
            return error_page(pages, _unavailable())
        return pages.render(template, view=view, actor=caller.actor.name, csrf=caller.csrf)

    @router.get("/dashboard")
    async def dashboard(request: Request) -> Response:
        return await render(request, "dashboard.html")

    @router.get("/dashboard/live")
    async def live(request: Request) -> Response:
        return await render(request, "live.html")

    return router


def _unavailable() -> GatewayError:
    return ServiceUnavailable("the store is unavailable; try again", code="store_unavailable")
