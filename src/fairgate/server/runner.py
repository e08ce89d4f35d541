"""Run the client and admin listeners in one event loop, and stop them gracefully.

Shutdown order on SIGTERM or SIGINT: the gateway is marked draining (``/readyz``
answers 503 at once), the client listener stops accepting and lets running
requests and streams finish for up to ``grace`` seconds (then cancels them),
the admin listener closes last, then the gateway's own tasks stop.
A second signal, one second or more after the first, skips the wait.

A listener with a TLS context serves HTTPS on its socket; a TLS handshake has
the listener's ``head_timeout`` to complete (asyncio's default is 60 s), so a
client that opens connections and never finishes a handshake holds each for no
longer than one that never finishes its request head.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import ssl
import sys
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
    tls: ssl.SSLContext | None = None  # HTTPS on this socket when set


def bind(host: str, port: int, *, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    """A listening TCP socket (IPv4 or IPv6 by the host's form), SO_REUSEADDR set.

    ``reuse_port`` sets SO_REUSEPORT: several processes then each listen on a socket of
    their own on one port and the kernel spreads new connections evenly between them
    (one shared socket lets whichever process wakes first take a whole burst of them).
    ``listen=False`` only binds: the port is held, no connection is accepted on it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _server(listener: Listener, grace: float) -> uvicorn.Server:
    tls = listener.tls
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
        # The listener's own context (its certificate swapped on reload), not uvicorn's.
        ssl_context_factory=None if tls is None else lambda _config, _default: tls,
    )
    config.load()
    server = _Server(config, handshake_timeout=listener.head_timeout)
    # Server.serve() would install its own signal handlers; startup() is called
    # directly instead, so the lifespan object serve() creates is created here.
    server.lifespan = config.lifespan_class(config)
    return server


class _Server(uvicorn.Server):
    """uvicorn's server, whose TLS handshakes time out like a request head does.

    ``startup`` is uvicorn's for pre-bound sockets, with the handshake and TLS
    shutdown timeouts passed to ``create_server`` (uvicorn passes neither)."""

    def __init__(self, config: uvicorn.Config, *, handshake_timeout: float) -> None:
        super().__init__(config)
        self.handshake_timeout = handshake_timeout

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if sockets is None or self.config.ssl is None:
            await super().startup(sockets)
            return
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            sys.exit(3)  # uvicorn's STARTUP_FAILURE
        config = self.config

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=_loop,
            )

        loop = asyncio.get_running_loop()
        self.servers = [
            await loop.create_server(
                create_protocol,
                sock=sock,
                ssl=config.ssl,
                backlog=config.backlog,
                ssl_handshake_timeout=self.handshake_timeout,
                ssl_shutdown_timeout=self.handshake_timeout,
            )
            for sock in sockets
        ]
        self.started = True


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
