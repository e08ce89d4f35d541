"""``GET /``: what the gateway is, its address, how to call it, its models, where keys come from."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from fairgate.web.origin import Origins
from fairgate.web.render import Pages
from fairgate.web.site import Site

__all__ = ["LandingPage"]


class LandingPage:
    """The start page; it reads no session and no store."""

    def __init__(self, site: Site, pages: Pages, origins: Origins) -> None:
        self._site = site
        self._pages = pages
        self._origins = origins

    async def get(self, request: Request) -> Response:
        return self._pages.html(
            "landing.html",
            base_url=self._origins.base_url(request),
            example_model=self._site.example_model,
            models=self._site.models,
            contact=self._site.contact,
        )
