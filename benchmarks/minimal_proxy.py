"""The yardstick: a minimal pass-through proxy, on a choice of server and client layers.

    python benchmarks/minimal_proxy.py --upstream http://127.0.0.1:8001 [--port 0]
        [--server uvicorn|granian|aiohttp] [--client aiohttp|httpx|raw]
    -> minimal proxy listening on http://127.0.0.1:PORT

What it does and nothing more: read the request body, forward it with the same method and
path to one fixed upstream through ONE shared keep-alive client, relay status,
content-type and body (SSE chunk by chunk; a client disconnect closes the upstream
connection). No auth, no limits, no routing, no metrics — what every gateway must pay at
least, so the gateway's overhead is judged against it (PRODUCT.md §2).

The default, ``--server uvicorn --client aiohttp``, is the gateway's own stack: a plain
ASGI app on uvicorn with uvloop and httptools, one worker, no access log, no Server and
Date headers. ``granian`` serves the same ASGI app (Rust HTTP layer, uvloop, one worker);
``aiohttp`` is aiohttp.web (not ASGI), with the aiohttp client whatever ``--client`` says.
``uvicorn-limited`` is uvicorn with the gateway's own protocol class
(``fairgate.server.protocol``: request-head timeout and size limit), to price that hardening.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from proxy_clients import CLIENTS, Receive, Send, UpstreamClient

__all__ = ["MinimalProxy", "app_from_env", "main"]

READY = "minimal proxy listening on http://{host}:{port}"


class MinimalProxy:
    """The ASGI app: one upstream, one client, opened on the first request in the loop."""

    def __init__(self, client: UpstreamClient) -> None:
        self._client = client
        self._opened = False

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(self._client, receive, send)
            return
        if scope["type"] != "http":
            return
        if not self._opened:
            self._opened = True
            await self._client.open()
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        ctype = next((v for k, v in scope["headers"] if k == b"content-type"), b"application/json")
        path = scope["path"] + (
            "?" + scope["query_string"].decode() if scope["query_string"] else ""
        )
        await self._client.relay(scope["method"], path, ctype, b"".join(chunks), receive, send)


async def _lifespan(client: UpstreamClient, receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await client.close()
            await send({"type": "lifespan.shutdown.complete"})
            return


def app_from_env() -> MinimalProxy:
    """Factory for servers that import the app by name (granian): settings from the env."""
    kind = os.environ["MINIMAL_PROXY_CLIENT"]
    return MinimalProxy(CLIENTS[kind](os.environ["MINIMAL_PROXY_UPSTREAM"]))


def _serve_uvicorn(app: MinimalProxy, host: str, port: int, *, limited: bool = False) -> None:
    import uvicorn
    import uvloop

    http: Any = "httptools"
    if limited:  # the gateway's own protocol class: head timeout and size limit added
        from fairgate.server.protocol import limited_protocol

        http = limited_protocol(head_timeout=10.0, max_head_bytes=65536, write_buffer_bytes=65536)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    config = uvicorn.Config(
        app,
        loop="none",
        http=http,
        ws="none",
        lifespan="off",
        access_log=False,
        log_level="warning",
        server_header=False,
        date_header=False,
        proxy_headers=False,  # X-Forwarded-* are a gateway's own business, not the server's
        timeout_keep_alive=75,
    )
    config.load()
    server = uvicorn.Server(config)
    # startup() is called directly (to print the bound port), so set what serve() would.
    server.lifespan = config.lifespan_class(config)

    async def run() -> None:
        await server.startup(sockets=[sock])
        print(READY.format(host=host, port=sock.getsockname()[1]), flush=True)
        await server.main_loop()
        await server.shutdown(sockets=[sock])

    uvloop.run(run())


def _serve_granian(host: str, port: int) -> None:
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.log import LogLevels
    from granian.server import Server

    port = port or _free_port(host)
    here = Path(__file__).resolve().parent
    threading.Thread(target=_announce_when_open, args=(host, port), daemon=True).start()
    Server(
        "minimal_proxy:app_from_env",
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        workers=1,
        runtime_threads=1,
        loop=Loops.uvloop,
        http=HTTPModes.http1,
        websockets=False,
        log_access=False,
        log_level=LogLevels.warning,
        factory=True,
        working_dir=here,
    ).serve()


def _serve_aiohttp(upstream: str, host: str, port: int) -> None:
    import uvloop
    from aiohttp import web

    from aiohttp_server import build_app

    async def run() -> None:
        runner = web.AppRunner(build_app(upstream), access_log=None, handle_signals=True)
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=2048)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(READY.format(host=host, port=bound), flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    uvloop.run(run())


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _announce_when_open(host: str, port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            time.sleep(0.05)
            continue
        print(READY.format(host=host, port=port), flush=True)
        return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8001")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    servers = ["uvicorn", "uvicorn-limited", "granian", "aiohttp"]
    parser.add_argument("--server", choices=servers, default="uvicorn")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="aiohttp")
    args = parser.parse_args(argv)
    os.environ["MINIMAL_PROXY_UPSTREAM"] = args.upstream
    os.environ["MINIMAL_PROXY_CLIENT"] = args.client
    try:
        if args.server.startswith("uvicorn"):
            limited = args.server == "uvicorn-limited"
            _serve_uvicorn(app_from_env(), args.host, args.port, limited=limited)
        elif args.server == "granian":
            _serve_granian(args.host, args.port)
        else:
            _serve_aiohttp(args.upstream, args.host, args.port)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
