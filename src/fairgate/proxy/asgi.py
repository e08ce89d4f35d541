"""The client listener's ASGI application: every HTTP request goes through the pipeline.

There is no framework on this path: the pipeline is the router, so a route cannot
be added around its stages (identify, limit, admit) by omission. The one
exception is the web pages (``fairgate.web``), mounted by an exact path set
(``Mount``): a request whose path is one of theirs goes to them, every other
path to the pipeline, at the cost of one set lookup and one ``startswith``.
"""

from __future__ import annotations

from fairgate.core.asgi import Mount, Receive, Scope, Send
from fairgate.proxy.pipeline import Pipeline

__all__ = ["ProxyApp"]


class ProxyApp:
    def __init__(self, pipeline: Pipeline, web: Mount | None = None) -> None:
        self._pipeline = pipeline
        self._web = web

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            web = self._web
            if web is not None and (
                scope["path"] in web.exact or scope["path"].startswith(web.prefixes)
            ):
                await web.app(scope, receive, send)
                return
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
