"""Process control: bind the listeners, run one gateway per worker process, stop on a signal.

``run`` is what ``fairgate serve`` calls; ``run_control_plane`` is ``fairgate
control-plane``: the same Gateway with only its admin listener bound (the fleet's
control plane and its admin API, no OpenAI API). It binds the sockets once, forks the
workers (each builds its own Gateway from the same Config; with several, each
listens on a client socket of its own on the port, SO_REUSEPORT, so that the
kernel spreads connections evenly over them), forwards stop signals
and SIGHUP to them and returns the exit status. The Gateway itself (fairgate.app)
only wires components; nothing there knows about processes or signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable, Sequence

from fairgate.app import Gateway
from fairgate.config import Config, ConfigError
from fairgate.config import Limits as LimitSettings
from fairgate.server.connections import ConnectionCaps
from fairgate.server.runner import Listener, bind, serve
from fairgate.server.tls import ServedTls, TlsCollector, listener_tls, reload_on_hangup
from fairgate.tenancy import ConfigConflict

__all__ = ["WorkersRefused", "run", "run_control_plane", "settle_heap"]

log = logging.getLogger("fairgate")


class WorkersRefused(Exception):
    """``--workers N`` (N > 1) with a state back end the workers cannot share."""


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_FORWARDED = (*_STOP_SIGNALS, signal.SIGHUP)  # SIGHUP: re-read the TLS certificates


def run(config: Config, *, workers: int = 1) -> int:
    """Serve until a signal; ``workers`` processes share the listening sockets.

    Prints one line to stdout once the listeners accept connections:
    ``fairgate listening on http://HOST:PORT admin http://HOST:PORT`` (``https``
    for a listener with TLS). Returns the process exit status. Raises ConfigConflict
    (one worker) when the configuration cannot be synced into the store, ConfigError
    when a listener's TLS material no longer loads.
    """
    if workers > 1 and config.state.backend == "memory":
        raise WorkersRefused(
            f"--workers {workers} needs state.backend: redis. With the memory back end each "
            "worker would keep its own rate-limit, budget and fair-share counters, so every "
            "limit would be multiplied by the number of workers."
        )
    tls = listener_tls(config)
    # With workers the parent only holds the client port: each worker listens on a socket
    # of its own there (SO_REUSEPORT), so the kernel spreads connections over all of them.
    host = config.listen.host
    client = bind(host, config.listen.port, reuse_port=workers > 1, listen=workers <= 1)
    admin = bind(config.admin_listen.host, config.admin_listen.port)
    announce = (
        f"fairgate listening on {_url(client, 'client' in tls)} admin {_url(admin, 'admin' in tls)}"
    )
    if workers <= 1:
        _run_loop(_serve(config, client, admin, tls, announce))
        return 0
    port = int(client.getsockname()[1])
    children: list[int] = []
    # Stop signals and SIGHUP wait, blocked, until each process has its handlers: a
    # worker inherits the mask and unblocks in _serve, the parent once it forwards them.
    signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    for _ in range(workers):
        listening, told = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child process
            status = 0
            try:
                os.close(listening)
                own = bind(host, port, reuse_port=True)
                client.close()
                os.write(told, b"1")  # listening: the parent may announce the port
                os.close(told)
                _run_loop(_serve(config, own, admin, tls, None))
            except ConfigConflict as conflict:
                log.error("the configuration cannot be synced into the store: %s", conflict)
                status = 1
            except ConfigError as error:
                for diagnostic in error.diagnostics:
                    log.error("%s", diagnostic)
                status = 1
            except BaseException:
                log.exception("worker failed")
                status = 1
            os._exit(status)
        children.append(pid)
        os.close(told)
        os.read(listening, 1)  # the worker listens (or died: end of file)
        os.close(listening)
    _forward_signals(children)  # before the announcement: a stop may follow it at once
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
    # The workers hold the listening sockets now. Were the parent to keep its copy of
    # the admin one, the port would go on accepting connections nobody serves once the
    # workers close theirs at shutdown, instead of refusing them.
    client.close()
    admin.close()
    print(announce, flush=True)
    return _supervise(children)


def run_control_plane(config: Config) -> int:
    """The control plane without the OpenAI API: the agents' gRPC listener, placement,
    the fleet's state in the store and the admin listener (its admin API), until a signal.

    Prints ``fairgate control-plane listening on admin URL agents HOST:PORT`` once both
    accept connections. ``config.control_plane`` must be set.
    """
    assert config.control_plane is not None
    tls = listener_tls(config)
    admin = bind(config.admin_listen.host, config.admin_listen.port)
    host = config.control_plane.listen.host

    def announce(gateway: Gateway) -> str:
        assert gateway.fleet is not None
        agents = f"[{host}]:{gateway.fleet.port}" if ":" in host else f"{host}:{gateway.fleet.port}"
        return (
            f"fairgate control-plane listening on admin {_url(admin, 'admin' in tls)} "
            f"agents {agents}"
        )

    _run_loop(_serve(config, None, admin, tls, announce))
    return 0


def _forward_signals(children: list[int]) -> None:
    def forward(signum: int, _frame: object) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    for sig in _FORWARDED:
        signal.signal(sig, forward)


def _supervise(children: list[int]) -> int:
    status = 0
    for pid in children:
        _, code = os.waitpid(pid, 0)
        status = status or os.waitstatus_to_exitcode(code)
    return status


async def _serve(
    config: Config,
    client: socket.socket | None,
    admin: socket.socket,
    tls: dict[str, ServedTls],
    announce: str | Callable[[Gateway], str] | None,
) -> None:
    """One gateway on these sockets; without `client`, only the admin listener (the
    control plane's process)."""
    stop = asyncio.Event()
    signals = _StopSignals(stop)
    signals.install()  # first thing, until serve() takes them over
    reload_on_hangup(tls)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)  # blocked across a fork
    gateway = Gateway(config)
    await gateway.start()
    settle_heap()
    gateway.metrics.registry.register(TlsCollector(tls.values()))
    limits = config.limits
    listeners: Sequence[Listener] = (
        *(
            [_listener("client", gateway, client, limits, limits.stream_buffer_bytes, tls)]
            if client is not None
            else []
        ),
        _listener("admin", gateway, admin, limits, 64 * 1024, tls),
    )

    def started(_: Sequence[Listener]) -> None:
        if announce:
            print(announce if isinstance(announce, str) else announce(gateway), flush=True)

    def draining() -> None:
        gateway.draining = True

    try:
        await serve(
            listeners,
            grace=config.proxy.shutdown_grace,
            on_started=started,
            on_draining=draining,
            stop=stop,
        )
    finally:
        signals.install()  # serve() gave them back to the default action
        await gateway.stop()


# Net allocations of tracked objects between two passes over the youngest generation
# (CPython's default is 700). A request frees nearly all it makes by reference counting, so
# frequent passes found little to collect.
_YOUNG_THRESHOLD = 10_000


def settle_heap() -> None:
    """Tune the cyclic garbage collector for serving, once the gateway has started.

    What start-up built (the configuration, the store's metadata, the templates: some
    200,000 objects) lives as long as the process: it is collected once and frozen, so the
    collector's full passes no longer walk it, and the youngest generation is collected
    every ``_YOUNG_THRESHOLD`` net allocations. On the full path this took the collector's
    CPU from ~45 µs a request to ~1 (docs/benchmarks.md). Frozen objects are still freed by
    reference counting; only a reference cycle among them is never collected."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(_YOUNG_THRESHOLD, middle, oldest)


class _StopSignals:
    """SIGTERM and SIGINT outside ``serve``'s own handling: while the gateway starts and
    while it stops.

    The first one sets ``stop`` (a gateway still starting stops once started: nothing
    is served yet, so nothing is lost); one that comes a second or more after it, as
    ``serve`` counts a second signal, exits at once. Without this the default action
    kills a process caught starting or stopping: a worker the parent of ``--workers``
    announced before it was ready, or one still saving its counters when the parent
    forwards the stop signal it got too.
    """

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self._first: float | None = None

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, signum: int) -> None:
        now = asyncio.get_running_loop().time()
        if self._first is None:
            self._first = now
            self._stop.set()
        elif now - self._first >= 1.0:
            os._exit(128 + signum)


def _listener(
    name: str,
    gateway: Gateway,
    sock: socket.socket,
    limits: LimitSettings,
    write_buffer_bytes: int,
    tls: dict[str, ServedTls],
) -> Listener:
    # The relay cuts a stream whose writes wait slow_reader_timeout; the kernel resets,
    # at twice that, any connection whose client has taken nothing (also one whose
    # answer was written whole and only waits for a polite close). Each connection may
    # hold a body of up to max_body_bytes: the connection caps bound that memory.
    metrics = gateway.metrics
    refused = metrics.connections_refused
    caps = ConnectionCaps(
        name,
        total=limits.max_connections,
        per_network=limits.max_connections_per_network,
        on_refused=lambda reason: refused.labels(name, reason).inc(),
        exempt=gateway.clients.trusted,  # a trusted proxy carries many clients
    )
    metrics.connections_open.labels(name).set_function(lambda: caps.open_connections)
    return Listener(
        name,
        gateway.proxy_app if name == "client" else gateway.admin_app,
        sock,
        limits.client_head_timeout,
        limits.max_header_bytes,
        write_buffer_bytes,
        stall_timeout=2 * limits.slow_reader_timeout,
        caps=caps,
        keep_alive_timeout=limits.client_keep_alive_timeout,
        tls=tls[name].context if name in tls else None,
    )


def _run_loop(main: asyncio.Future[None] | object) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - platforms without uvloop
        asyncio.run(main)  # type: ignore[arg-type]
        return
    uvloop.run(main)  # type: ignore[arg-type]


def _url(sock: socket.socket, tls: bool) -> str:
    host, port = sock.getsockname()[:2]
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
