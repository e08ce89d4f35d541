"""``/scim/v2`` and everything under it go to the SCIM application, the rest to the admin API.

The SCIM application (``fairgate.scim``) answers in SCIM's own shapes, so it is
not a FastAPI route: it sits beside the admin API, behind the same door (the
route classes' networks, the client's address) and the same body limit. It is
called with ``root_path`` ``/scim``, from which scim2-server builds the
``/scim/v2`` base of every ``meta.location``.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["SCIM_PREFIX", "ScimPrefix"]

SCIM_PREFIX = "/scim/v2"


class ScimPrefix:
    """ASGI dispatch on the path: SCIM's prefix to ``scim``, other paths to ``app``."""

    def __init__(self, app: ASGIApp, scim: ASGIApp) -> None:
        self.app = app
        self.scim = scim

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == SCIM_PREFIX or path.startswith(SCIM_PREFIX + "/"):
            scoped = {**scope, "root_path": scope.get("root_path", "") + "/scim"}
            await self.scim(scoped, receive, send)
            return
        await self.app(scope, receive, send)
