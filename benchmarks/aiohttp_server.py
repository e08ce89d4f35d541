"""The minimal proxy as an aiohttp.web application (server and client both aiohttp).

Not ASGI, so not a stack the gateway could move to without rewriting its endpoints; it is
measured to see what the ASGI server layer itself costs against a server whose request
objects and client share one library and one event loop integration.
"""

from __future__ import annotations

import aiohttp
from aiohttp import web

__all__ = ["build_app"]


def build_app(upstream: str) -> web.Application:
    """An app forwarding every request to ``upstream`` through one shared ClientSession."""
    base = upstream.rstrip("/")
    app = web.Application()
    session_key = web.AppKey("session", aiohttp.ClientSession)

    async def on_startup(app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=75)
        app[session_key] = aiohttp.ClientSession(connector=connector, auto_decompress=False)

    async def on_cleanup(app: web.Application) -> None:
        await app[session_key].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        session = request.app[session_key]
        async with session.request(
            request.method, base + request.path_qs, data=body, headers=headers
        ) as resp:
            ctype = resp.headers.get("content-type", "application/json")
            if not ctype.startswith("text/event-stream"):
                data = await resp.read()
                return web.Response(status=resp.status, body=data, headers={"content-type": ctype})
            out = web.StreamResponse(status=resp.status, headers={"content-type": ctype})
            await out.prepare(request)
            async for chunk in resp.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app
