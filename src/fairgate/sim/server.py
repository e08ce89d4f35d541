"""Running the simulator: uvicorn with uvloop and httptools, one ready line, clean signals.

Once the socket listens, exactly one line goes to stdout, flushed:

    fairgate sim listening on http://127.0.0.1:41234

(the address as bound, so ``--port 0`` reveals the port it got). Everything else
goes to stderr. SIGTERM and SIGINT stop the server: the engine drops what it
holds (streams end without their terminator), connections close, and the
process exits with status 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

import uvicorn

from fairgate.sim.app import SimApp
from fairgate.sim.config import SimConfig
from fairgate.sim.generation import InjectedClose

__all__ = ["READY_PREFIX", "ready_line", "serve"]

READY_PREFIX = "fairgate sim listening on "


def ready_line(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{READY_PREFIX}http://{shown}:{port}"


class _Server(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        on_ready: Callable[[str, int], None],
        on_shutdown: Callable[[], None],
    ) -> None:
        super().__init__(config)
        self._on_ready = on_ready
        self._on_shutdown = on_shutdown

    async def startup(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        await super().startup(sockets)  # type: ignore[arg-type]
        if self.should_exit or not self.servers:
            return
        bound = self.servers[0].sockets[0].getsockname()
        self._on_ready(str(bound[0]), int(bound[1]))

    async def shutdown(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        # A simulated engine going down drops its work at once rather than letting
        # streams of minutes hold the shutdown until the graceful timeout.
        self._on_shutdown()
        await super().shutdown(sockets)  # type: ignore[arg-type]


class _DropExpected(logging.Filter):
    """uvicorn logs an app exception as an error with its traceback; an injected
    close is not one, nor a task cancelled because shutdown's grace period ran out."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, InjectedClose | asyncio.CancelledError)


def _announce(host: str, port: int) -> None:
    sys.stdout.write(ready_line(host, port) + "\n")
    sys.stdout.flush()


def _noted(signum: int, frame: FrameType | None) -> None:
    """Stands in for the default handlers once uvicorn has handled the signal."""


def serve(config: SimConfig, on_ready: Callable[[str, int], None] = _announce) -> None:
    """Serve until SIGTERM/SIGINT; ``on_ready(host, port)`` runs once listening."""
    app = SimApp(config)
    uv_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level="warning",
        proxy_headers=False,
        timeout_graceful_shutdown=max(1, round(config.shutdown_timeout)),
    )
    error_log = logging.getLogger("uvicorn.error")
    drop = _DropExpected()
    error_log.addFilter(drop)
    server = _Server(uv_config, on_ready, app.shutting_down)
    main = threading.current_thread() is threading.main_thread()
    # uvicorn re-raises the signal it caught once it has stopped; with these
    # handlers in place that ends in a normal exit instead of a signal death.
    previous = (
        {s: signal.signal(s, _noted) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    )
    try:
        server.run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        error_log.removeFilter(drop)
    if not server.started:
        raise SystemExit(3)
