"""Run the client and admin listeners in one event loop, and stop them gracefully.

Shutdown order on SIGTERM or SIGINT: the gateway is marked draining (``/readyz``
answers 503 at once), the client listener stops accepting and lets running
requests and streams finish for up to ``grace`` seconds (then cancels them),
the admin listener closes last, then the gateway's own tasks stop.
A second signal, one second or more after the first, skips the wait.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn

from fairgate.server.connections import ConnectionCaps
from fairgate.server.protocol import limited_protocol

__all__ = ["Listener", "bind", "serve"]

log = logging.getLogger("fairgate.server")

# One stop request often arrives as several signals at once: systemd signals every
# process of the unit, a terminal the whole process group, and the parent of
# ``--workers`` forwards its own. Only a signal this many seconds after the first
# counts as a second one (which skips the wait).
_REPEAT_AFTER = 1.0


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # "client" or "admin"
    app: Any
    sock: socket.socket
    head_timeout: float
    max_head_bytes: int
    write_buffer_bytes: int
    stall_timeout: float | None = None  # a client taking no bytes this long is reset (Linux)
    caps: ConnectionCaps | None = None  # connections held at once, in total and per network
    keep_alive_timeout: float = 15.0  # an idle kept-alive connection is closed after this


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (IPv4 or IPv6 by the host's form), SO_REUSEADDR set."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _server(listener: Listener, grace: float) -> uvicorn.Server:
    config = uvicorn.Config(
        listener.app,
        loop="none",
        http=limited_protocol(
            head_timeout=listener.head_timeout,
            max_head_bytes=listener.max_head_bytes,
            write_buffer_bytes=listener.write_buffer_bytes,
            stall_timeout=listener.stall_timeout,
            caps=listener.caps,
        ),
        ws="none",
        lifespan="off",
        access_log=False,
        log_config=None,
        server_header=False,
        # The client address is the connection's; X-Forwarded-For is never trusted here
        # (trusted proxies are configured per CIDR by the gateway itself).
        proxy_headers=False,
        date_header=False,
        timeout_keep_alive=listener.keep_alive_timeout,  # type: ignore[arg-type]  # a float works
        timeout_graceful_shutdown=max(0.1, grace),  # type: ignore[arg-type]  # a float works
    )
    config.load()
    server = uvicorn.Server(config)
    # Server.serve() would install its own signal handlers; startup() is called
    # directly instead, so the lifespan object serve() creates is created here.
    server.lifespan = config.lifespan_class(config)
    return server


async def serve(
    listeners: Sequence[Listener],
    *,
    grace: float,
    on_started: Callable[[Sequence[Listener]], None] | None = None,
    on_draining: Callable[[], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until a signal (or ``stop``) arrives, then shut down in order."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    first: float | None = None

    def on_signal() -> None:
        nonlocal first
        now = loop.time()
        if first is None:
            first = now
            log.info("shutting down: draining for up to %.0fs", grace)
            stop.set()
        elif now - first >= _REPEAT_AFTER:
            log.warning("second signal: stopping without waiting for running requests")
            for server in servers:
                server.force_exit = True

    servers = [_server(listener, grace) for listener in listeners]
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        for server, listener in zip(servers, listeners, strict=True):
            await server.startup(sockets=[listener.sock])
        if on_started is not None:
            on_started(listeners)
        await stop.wait()
        if on_draining is not None:
            on_draining()
        # Client listeners first (they hold the streams), the admin listener last.
        order = sorted(zip(servers, listeners, strict=True), key=lambda p: p[1].name == "admin")
        for server, _listener in order:
            await _shutdown(server)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def _shutdown(server: uvicorn.Server) -> None:
    waiter: Awaitable[None] = server.shutdown()
    await waiter
