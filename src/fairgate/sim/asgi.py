"""The few ASGI moves the simulator needs: read a body, answer, notice a client that left."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

__all__ = [
    "ClientGone",
    "Receive",
    "Scope",
    "Send",
    "Watch",
    "header",
    "read_body",
    "respond",
    "vllm_error",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = b"application/json"
_ERROR_TYPES = {
    400: "BadRequestError",
    401: "UnauthorizedError",
    403: "ForbiddenError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    413: "RequestEntityTooLargeError",
    429: "TooManyRequestsError",
    500: "InternalServerError",
    501: "NotImplementedError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


class ClientGone(Exception):
    """The client disconnected while the body was being read."""


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower case), or ``None``."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


async def read_body(receive: Receive) -> bytes:
    """The whole request body; ``ClientGone`` if the client left first."""
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientGone
    body = message.get("body", b"")
    if not message.get("more_body"):
        return bytes(body)
    chunks = [body]
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes = JSON,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """A complete response with a Content-Length."""
    head = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if headers:
        head.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def vllm_error(status: int, message: str) -> bytes:
    """vLLM's error body: the OpenAI envelope with ``param`` and the status as ``code``."""
    kind = _ERROR_TYPES.get(status, "InternalServerError")
    return orjson.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": status}}
    )


class Watch:
    """Watches ``receive`` for ``http.disconnect`` while a response is being produced.

    Contract: once ``start``-ed, ``gone`` is set the moment the client
    disconnects and ``on_gone`` (if set by then) runs once. ``sleep`` starts the
    watch and returns early when the client goes. One task per watched request,
    none for a request answered on the spot, nothing per token; ``close`` stops it.
    """

    def __init__(self, receive: Receive) -> None:
        self.gone = asyncio.Event()
        self.on_gone: Callable[[], None] | None = None
        self._receive = receive
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self.gone.set()
        if self.on_gone is not None:
            self.on_gone()

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0 or self.gone.is_set():
            return
        self.start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.gone.wait(), seconds)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
