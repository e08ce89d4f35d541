"""The composition root: a validated Config in, one Gateway out, every concrete class named here.

No component reads the configuration file, the environment or a global: each
gets what it needs in its constructor from here. Background work (health
checks, metric scrapes) are asyncio tasks the Gateway owns and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator, Sequence

from fairgate.accounting import Recorder, StoreUsageWriter, prices_by_model
from fairgate.admin import build_admin_app
from fairgate.auth import Authenticator, FailureLimiter, KeyCache, ModelResolver, sha256
from fairgate.config import Config
from fairgate.core.clock import SystemClock
from fairgate.engines import EngineAdapter, adapter_for
from fairgate.observability.metrics import GatewayMetrics, ReplicaGauge
from fairgate.proxy.asgi import ProxyApp
from fairgate.proxy.pipeline import Pipeline
from fairgate.proxy.records import RecordBuilder
from fairgate.proxy.relay import Deadlines, Relay
from fairgate.proxy.request import Caps
from fairgate.proxy.routes import RouteTable
from fairgate.proxy.settle import Settler
from fairgate.server.runner import Listener, bind, serve
from fairgate.store import StoreKeyDirectory, upgrade
from fairgate.tenancy import Tenancy, build_store, model_names
from fairgate.upstream import (
    Breaker,
    HealthChecker,
    MetricsScraper,
    Replica,
    ReplicaRegistry,
    UpstreamPool,
    UpstreamSessions,
)

__all__ = ["Gateway", "run"]

log = logging.getLogger("fairgate")


class Gateway:
    """Everything one gateway process runs, built from one Config."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.draining = False
        limits = config.limits
        adapters: dict[str, EngineAdapter] = {
            kind: adapter_for(kind) for kind in sorted({m.engine for m in config.models})
        }
        self.registry = ReplicaRegistry(self._replicas(config, adapters))
        self.metrics = GatewayMetrics(replicas=self._replica_gauges)
        # Health checks and metric scrapes use aiohttp; requests use the lean pool.
        self.sessions = UpstreamSessions(connect_timeout=limits.connect_timeout)
        # Idle connections are dropped before the engines' own keep-alive timeout
        # (uvicorn's 5 s for vLLM), so a reused connection is rarely closed under us.
        self.pool = UpstreamPool(connect_timeout=limits.connect_timeout, idle_timeout=4.0)
        self.relay = Relay(
            Deadlines(
                connect=limits.connect_timeout,
                headers=limits.headers_timeout,
                first_token=limits.first_token_timeout,
                idle=limits.idle_timeout,
                total=limits.total_timeout,
                slow_reader=limits.slow_reader_timeout,
                max_response_bytes=limits.max_response_bytes,
            ),
            self.pool,
            self.metrics.streams_open,
        )
        self.routes = RouteTable(config.models, adapters)
        # Tenancy: the store is opened in start(); nothing on the request path reads it
        # except a key-cache miss.
        clock = SystemClock()
        self.store = build_store(config)
        self.tenancy = Tenancy(self.store, models=model_names(config))
        a = config.auth
        self.failures = FailureLimiter(
            a.failures_per_minute, clock, max_networks=a.failure_networks_max
        )
        self.authenticator = Authenticator(
            StoreKeyDirectory(self.store),
            KeyCache(a.key_cache_size, a.key_cache_ttl, a.miss_cache_size, a.miss_cache_ttl, clock),
            self.failures,
            ModelResolver({n: m.name for m in config.models for n in (m.name, *m.aliases)}),
            clock,
        )
        accounted = self.metrics.accounting
        self.recorder = Recorder(
            StoreUsageWriter(self.store),
            on_written=lambda n: accounted.labels("written").inc(n),
            on_dropped=lambda n: accounted.labels("dropped").inc(n),
            on_failed=lambda n: accounted.labels("failed").inc(n),
        )
        records = RecordBuilder(
            self.recorder.record,
            prices_by_model(config.models),
            {m.name: m.pool for m in config.models},
        )
        self.pipeline = Pipeline(
            routes=self.routes,
            caps=Caps(
                max_body_bytes=limits.max_body_bytes,
                body_timeout=limits.client_body_timeout,
                max_n=limits.max_n,
                max_tokens=limits.max_tokens,
                max_grammar_bytes=limits.max_grammar_bytes,
            ),
            relay=self.relay,
            registry=self.registry,
            settler=Settler(self.metrics, records),
            retries=config.proxy.retries,
            request_ids=_request_ids(),
            stopping=lambda: self.draining,
            authenticate=self.authenticator.authenticate,
        )
        self.proxy_app = ProxyApp(self.pipeline)
        master = config.master_key_file
        self.admin_app = build_admin_app(
            tenancy=self.tenancy,
            master_key_sha256=sha256(master.read()) if master is not None else None,
            failure_limiter=self.failures,
            registry=self.metrics.registry,
            models_ready=self.registry.ready,
            draining=lambda: self.draining,
        )
        self.health = HealthChecker(
            self.registry,
            self.sessions,
            interval=config.health.interval,
            timeout=config.health.timeout,
        )
        self.scraper = MetricsScraper(
            self.registry,
            self.sessions,
            interval=config.health.interval,
            timeout=config.health.timeout,
            stale_after=3 * config.health.interval,
        )

    @staticmethod
    def _replicas(config: Config, adapters: dict[str, EngineAdapter]) -> list[Replica]:
        b = config.breaker
        return [
            Replica(
                name=upstream.name,
                model=model.name,
                url=upstream.url,
                weight=upstream.weight,
                internal_key=upstream.key_file.read() if upstream.key_file else None,
                adapter=adapters[model.engine],
                breaker=Breaker(
                    failures=b.failures,
                    backoff_initial=b.backoff_initial,
                    backoff_max=b.backoff_max,
                ),
            )
            for model in config.models
            for upstream in model.upstreams
        ]

    def _replica_gauges(self) -> Iterator[ReplicaGauge]:
        for model in self.config.models:
            for replica in self.registry.replicas(model.name):
                yield (
                    model.name,
                    replica.name,
                    replica.healthy,
                    replica.in_flight,
                    replica.breaker.blocked(),
                )

    async def start(self) -> None:
        """Open the store (upgrading its schema, syncing the declared organisations),
        then start the background tasks (health checks, metric scrapes)."""
        await self.store.connect()
        revision = await upgrade(self.store)
        report = await self.tenancy.sync_orgs(self.config.orgs)
        log.info("store at schema %s; organisations %s", revision, report)
        self.recorder.start()
        self.health.start()
        self.scraper.start()

    async def stop(self) -> None:
        """Stop background tasks and close upstream connections."""
        await self.health.stop()
        await self.scraper.stop()
        await self.sessions.close()
        await self.pool.close()
        # Every record queued so far reaches the store before it closes (SIGTERM loses none).
        if not await self.recorder.drain(timeout=30.0):
            log.error("accounting: some usage records could not be written at shutdown")
        await self.store.close()


def _request_ids() -> Callable[[], str]:
    prefix = os.urandom(6).hex()
    counter = itertools.count(1)

    def next_id() -> str:
        return f"{prefix}{next(counter):010x}"

    return next_id


def run(config: Config, *, workers: int = 1) -> int:
    """Serve until a signal; ``workers`` processes share the listening sockets.

    Prints one line to stdout once the listeners accept connections:
    ``fairgate listening on http://HOST:PORT admin http://HOST:PORT``.
    Returns the process exit status.
    """
    client = bind(config.listen.host, config.listen.port)
    admin = bind(config.admin_listen.host, config.admin_listen.port)
    announce = f"fairgate listening on {_url(client)} admin {_url(admin)}"
    if workers <= 1:
        _run_loop(_serve(config, client, admin, announce))
        return 0
    children: list[int] = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child process
            status = 0
            try:
                _run_loop(_serve(config, client, admin, None))
            except BaseException:
                log.exception("worker failed")
                status = 1
            os._exit(status)
        children.append(pid)
    # The workers hold the listening sockets now. Were the parent to keep its copies,
    # the port would go on accepting connections nobody serves once the workers
    # close theirs at shutdown, instead of refusing them.
    client.close()
    admin.close()
    print(announce, flush=True)
    return _supervise(children)


def _supervise(children: list[int]) -> int:
    def forward(signum: int, _frame: object) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    for pid in children:
        _, code = os.waitpid(pid, 0)
        status = status or os.waitstatus_to_exitcode(code)
    return status


async def _serve(
    config: Config, client: socket.socket, admin: socket.socket, announce: str | None
) -> None:
    gateway = Gateway(config)
    await gateway.start()
    limits = config.limits
    # The relay cuts a stream whose writes wait slow_reader_timeout; the kernel resets,
    # at twice that, any connection whose client has taken nothing (also one whose
    # answer was written whole and only waits for a polite close).
    stall = 2 * limits.slow_reader_timeout
    listeners: Sequence[Listener] = (
        Listener(
            "client",
            gateway.proxy_app,
            client,
            limits.client_head_timeout,
            limits.max_header_bytes,
            limits.stream_buffer_bytes,
            stall_timeout=stall,
        ),
        Listener(
            "admin",
            gateway.admin_app,
            admin,
            limits.client_head_timeout,
            limits.max_header_bytes,
            64 * 1024,
            stall_timeout=stall,
        ),
    )

    def started(_: Sequence[Listener]) -> None:
        if announce:
            print(announce, flush=True)

    def draining() -> None:
        gateway.draining = True

    try:
        await serve(
            listeners, grace=config.proxy.shutdown_grace, on_started=started, on_draining=draining
        )
    finally:
        await gateway.stop()


def _run_loop(main: asyncio.Future[None] | object) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - platforms without uvloop
        asyncio.run(main)  # type: ignore[arg-type]
        return
    uvloop.run(main)  # type: ignore[arg-type]


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
