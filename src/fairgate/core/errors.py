"""Errors the gateway answers with, and the OpenAI error envelope they render to.

Every 4xx/5xx the gateway itself produces is one of these; the HTTP layers turn
it into ``{"error": {"message", "type", "code"}}`` with the status below.

    GatewayError
    ├── BadRequest            400  invalid_request_error   malformed input (never 422)
    ├── Unauthorized          401  authentication_error    unknown, revoked or expired credential
    ├── Forbidden             403  permission_error
    ├── NotFound              404  not_found_error         unknown or hidden model, refused path
    ├── PayloadTooLarge       413  invalid_request_error
    ├── RateLimited           429  rate_limit_error        carries retry_after (seconds) or None
    ├── BadGateway            502  upstream_error          the engine answered wrongly or broke off
    ├── ServiceUnavailable    503  service_unavailable     nothing can serve it now (no replica…)
    └── GatewayTimeout        504  timeout_error           a deadline fired before the first byte

Messages are written for the caller and never contain a secret; the reason a
server operator needs goes to the log, not to the message.
"""

from __future__ import annotations

import math
from typing import ClassVar

import orjson

__all__ = [
    "BadGateway",
    "BadRequest",
    "Forbidden",
    "GatewayError",
    "GatewayTimeout",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "ServiceUnavailable",
    "StoreUnavailable",
    "Unauthorized",
    "error_body",
]


class GatewayError(Exception):
    """An error the gateway answers itself, rendered as an OpenAI error envelope."""

    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def body(self) -> bytes:
        return error_body(self.message, self.type, self.code)

    def headers(self) -> list[tuple[bytes, bytes]]:
        return []


class BadRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class Unauthorized(GatewayError):
    status = 401
    type = "authentication_error"


class Forbidden(GatewayError):
    status = 403
    type = "permission_error"


class NotFound(GatewayError):
    status = 404
    type = "not_found_error"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"

    def __init__(
        self, message: str, *, code: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after

    def headers(self) -> list[tuple[bytes, bytes]]:
        if self.retry_after is None:
            return []
        # whole seconds, never below the wait: a client that waits them is not refused
        seconds = max(1, math.ceil(self.retry_after))
        return [(b"retry-after", str(seconds).encode())]


class BadGateway(GatewayError):
    status = 502
    type = "upstream_error"


class ServiceUnavailable(GatewayError):
    status = 503
    type = "service_unavailable"


class GatewayTimeout(GatewayError):
    status = 504
    type = "timeout_error"


class StoreUnavailable(Exception):
    """The durable store (SQLite or PostgreSQL) could not answer.

    Not a GatewayError: each caller decides what it means. Authentication turns it
    into a 503 (never a 401) and never caches it.
    """


def error_body(message: str, type_: str, code: str | None = None) -> bytes:
    """The OpenAI error envelope as JSON bytes."""
    return orjson.dumps({"error": {"message": message, "type": type_, "code": code}})
