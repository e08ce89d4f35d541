"""Every error of the admin API as the OpenAI error envelope, FastAPI's own included.

GatewayError (any)          its status and envelope (400, 401, 403, 404, 409, 413, 429)
RequestValidationError      400, "body.rpm: Input should be a valid integer" (never 422)
StoreUnavailable            503 service_unavailable: the store did not answer
unknown route / method      404 / 405
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from fairgate.core.errors import GatewayError, StoreUnavailable, error_body

__all__ = ["install_error_handlers"]

log = logging.getLogger("fairgate.admin")


def _envelope(status: int, body: bytes, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, media_type="application/json", headers=headers)


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    headers = {k.decode(): v.decode() for k, v in exc.headers()}
    return _envelope(exc.status, exc.body(), headers)


async def _invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return _envelope(
        400, error_body(_describe(exc.errors()), "invalid_request_error", "invalid_request")
    )


async def _store_down(request: Request, exc: Exception) -> Response:
    log.error("admin API: %s", exc)
    body = error_body("the store is unavailable; try again", "service_unavailable", "store_down")
    return _envelope(503, body)


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        body = error_body("method not allowed", "invalid_request_error", "method_not_allowed")
        return _envelope(405, body)
    if exc.status_code == 404:
        return _envelope(404, error_body("unknown route", "not_found_error", "unknown_route"))
    return _envelope(exc.status_code, error_body(str(exc.detail), "invalid_request_error", None))


def _describe(errors: Any) -> str:
    """The first validation problem in words: where, then what."""
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        return f"unknown field {where!r}"
    if kind == "json_invalid":
        return "the body is not valid JSON"
    if kind == "missing":
        return f"{where}: field required"
    message = str(first.get("msg", "invalid value"))
    return f"{where}: {message}" if where else message


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StoreUnavailable, _store_down)
    app.add_exception_handler(HTTPException, _http)
