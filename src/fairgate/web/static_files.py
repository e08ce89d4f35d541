"""``GET /static/style.css``: the pages' one stylesheet, read from the package once."""

from __future__ import annotations

from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["Stylesheet"]


class Stylesheet:
    """The stylesheet's bytes, served with a day's caching (it changes only with a release)."""

    def __init__(self) -> None:
        self._body = files("fairgate.web").joinpath("static/style.css").read_bytes()

    async def get(self, request: Request) -> Response:
        return Response(
            self._body,
            media_type="text/css",
            headers={"cache-control": "public, max-age=86400"},
        )
