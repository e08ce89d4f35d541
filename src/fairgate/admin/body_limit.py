"""Admin request bodies bounded to 64 KiB: larger → 413 before the endpoint runs.

The body is read in full by this middleware (admin bodies are small) and handed
on unchanged; a Content-Length over the limit is refused before reading. Under
``/scim/v2`` the 413 is a SCIM error document (``urn:…:api:messages:2.0:Error``,
``application/scim+json``), as every other SCIM answer is; elsewhere the OpenAI
error envelope.
"""

from __future__ import annotations

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fairgate.admin.scim_prefix import SCIM_PREFIX
from fairgate.core.errors import PayloadTooLarge

__all__ = ["MAX_ADMIN_BODY", "BodyLimit"]

MAX_ADMIN_BODY = 64 * 1024

SCIM_ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


class BodyLimit:
    """ASGI middleware: at most ``limit`` bytes of request body per HTTP request."""

    def __init__(self, app: ASGIApp, limit: int = MAX_ADMIN_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await _too_large(scope, send, self.limit)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await _too_large(scope, send, self.limit)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        await self.app(scope, _replay([{"type": "http.request", "body": body}], receive), send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    queue = list(messages)

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive


async def _too_large(scope: Scope, send: Send, limit: int) -> None:
    error = PayloadTooLarge(f"admin request bodies are limited to {limit} bytes", code="too_large")
    body, media = error.body(), b"application/json"
    path = scope.get("path", "")
    if path == SCIM_PREFIX or path.startswith(SCIM_PREFIX + "/"):
        body = orjson.dumps(
            {"schemas": [SCIM_ERROR], "status": str(error.status), "detail": error.message}
        )
        media = b"application/scim+json"
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [
                (b"content-type", media),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
