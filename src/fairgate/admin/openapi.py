"""The admin API's OpenAPI document: every error it can answer, declared as it is sent.

Every admin error is the OpenAI envelope (``fairgate.admin.errors``), so every
operation declares the statuses any of them may answer with that body; a
client generated from the document, or schemathesis, then knows them. FastAPI's
own ``422`` (with its ``HTTPValidationError`` body) is removed: validation
errors are answered ``400`` with the envelope, never ``422``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

__all__ = ["ERROR_RESPONSES", "ErrorEnvelope", "install_openapi"]


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: str | None


class ErrorEnvelope(BaseModel):
    """The OpenAI error envelope every admin error has as its body."""

    error: ErrorDetail


_ERRORS = {
    400: "Invalid request: a parameter, field or value refused (the message names it)",
    401: "No valid master key or admin token",
    403: "The caller's roles do not allow this",
    404: "No such route or object",
    405: "The route does not take this method",
    409: "The object exists already, or the change conflicts with its state",
    413: "The body is larger than 64 KiB",
    429: "Too many failed authentications from this network; retry after Retry-After",
    503: "The store did not answer; retry",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorEnvelope, "description": text} for status, text in _ERRORS.items()
}
_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")


def install_openapi(app: FastAPI) -> None:
    """Serve ``app``'s document without FastAPI's ``422`` responses (built once, on first use)."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, routes=app.routes, servers=app.servers
            )
            for path in schema.get("paths", {}).values():
                for operation in path.values():
                    operation.get("responses", {}).pop("422", None)
            schemas = schema.get("components", {}).get("schemas", {})
            for name in _VALIDATION_SCHEMAS:
                schemas.pop(name, None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]
