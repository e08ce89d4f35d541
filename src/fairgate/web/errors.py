"""The error pages: one clear page per status, the reason in the server log only.

``PageError(status, title, message)`` raised by an endpoint renders
``error.html`` with that status; ``log_reason`` is what the log gets (never a
secret: a form value is never logged, only which rule refused it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from fairgate.web.render import Pages

__all__ = ["PageError", "error_handlers", "failure_page"]

log = logging.getLogger("fairgate.web")

_TITLES = {
    400: ("Bad request", "The form could not be read. Go back, reload the page and try again."),
    403: ("Forbidden", "This request is not allowed."),
    404: ("Not found", "There is no page at this address."),
    405: ("Method not allowed", "This page does not accept that kind of request."),
    413: ("Too large", "The form sent was larger than this gateway accepts."),
    429: ("Too many attempts", "Too many attempts. Wait a while and try again."),
    500: ("Something went wrong", "The gateway could not answer this page. Try again later."),
    503: ("Busy", "The gateway is busy. Try again in a moment."),
}


class PageError(Exception):
    """An error page: ``status``, the page's ``title`` and ``message``, the ``log_reason``
    and any extra response ``headers`` (``Retry-After``)."""

    def __init__(
        self,
        status: int,
        log_reason: str,
        *,
        title: str | None = None,
        message: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(log_reason)
        default_title, default_message = _TITLES.get(status, _TITLES[400])
        self.status = status
        self.title = title or default_title
        self.message = message or default_message
        self.log_reason = log_reason
        self.headers = dict(headers or {})


def error_handlers(pages: Pages) -> dict[type[Exception] | int, object]:
    """Starlette exception handlers rendering ``PageError`` and Starlette's HTTP errors."""

    async def page_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, PageError)
        log.info(
            "web %s %s: %d %s", request.method, request.url.path, error.status, error.log_reason
        )
        return pages.html(
            "error.html",
            status=error.status,
            headers=error.headers,
            title=error.title,
            message=error.message,
        )

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        title, message = _TITLES.get(error.status_code, _TITLES[400])
        headers = dict(error.headers or {})
        return pages.html(
            "error.html", status=error.status_code, headers=headers, title=title, message=message
        )

    return {PageError: page_error, HTTPException: http_error}


def failure_page(pages: Pages, request: Request) -> Response:
    """The page of an unexpected error (the traceback goes to the log, nothing to the page)."""
    log.exception("web %s %s failed", request.method, request.url.path)
    title, message = _TITLES[500]
    return pages.html("error.html", status=500, title=title, message=message)
