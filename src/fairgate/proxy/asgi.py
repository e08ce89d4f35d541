"""The client listener's ASGI application: every HTTP request goes through the pipeline.

There is no framework on this path: the pipeline is the router, so a route cannot
be added around its stages (identify, limit, admit) by omission.
"""

from __future__ import annotations

from fairgate.core.asgi import Receive, Scope, Send
from fairgate.proxy.pipeline import Pipeline

__all__ = ["ProxyApp"]


class ProxyApp:
    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._pipeline.handle(scope, receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        elif kind == "lifespan":
            await _lifespan(receive, send)


async def _lifespan(receive: Receive, send: Send) -> None:
    # The Gateway starts and stops its components itself; lifespan is acknowledged only.
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
