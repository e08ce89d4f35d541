"""The composition root: a validated Config in, one Gateway out, every concrete class named here.

No component reads the configuration file, the environment or a global: each
gets what it needs in its constructor from here. Background work (health
checks, metric scrapes) are asyncio tasks the Gateway owns and stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import grpc
from prometheus_client import Counter

from fairgate.accounting import (
    Alerter,
    Recorder,
    SignUpNotices,
    SmtpTarget,
    StoreUsageWriter,
    WebhookTarget,
    prices_by_model,
)
from fairgate.accounting.budget_keeper import BudgetKeeper
from fairgate.accounting.journal import Journal
from fairgate.accounting.retention import Pruner
from fairgate.accounting.snapshots import SPARE as SNAPSHOT_SPARE
from fairgate.accounting.snapshots import CounterSnapshots
from fairgate.accounts import build_accounts
from fairgate.admin import build_admin_app
from fairgate.admin.dashboard import DecisionRing
from fairgate.admin.dashboard.build import DECISIONS_KEPT, build_board
from fairgate.admin.fairshare import FairShareMonitor
from fairgate.admin.sso.client import SsoClient
from fairgate.admission import (
    AdmissionController,
    Bands,
    CapacityTracker,
    SaturationDetector,
)
from fairgate.auth import (
    Authenticator,
    AuthGuard,
    ChangeWatcher,
    FailureLimiter,
    KeyCache,
    LookupCeiling,
    ModelResolver,
    Waker,
    sha256,
)
from fairgate.auth.jwt import (
    EXCHANGE_COUNTER,
    ExchangeIssuer,
    Exchanger,
    KeySource,
    ProviderUnavailable,
    TokenAuthenticator,
    TokenVerifier,
)
from fairgate.auth.shared_failures import SharedFailures
from fairgate.config import Config, ConfigError, Diagnostic, Mark, Model
from fairgate.config.jwt import Jwt
from fairgate.core.cidr import NetworkSet, parse_network
from fairgate.core.client_addr import ClientAddresses
from fairgate.core.clock import Clock, SystemClock
from fairgate.core.errors import StoreUnavailable
from fairgate.core.limits import Limits
from fairgate.core.money import Money
from fairgate.core.principal import Principal
from fairgate.core.route_classes import RouteClass, RouteRules
from fairgate.engines import EngineAdapter, adapter_for
from fairgate.fairshare import FairShare
from fairgate.fairshare.learned_capacity import (
    DEFAULT_KV_LIMIT,
    DEFAULT_RISE_AFTER,
    CapacityLearner,
)
from fairgate.fleet.control import server_credentials
from fairgate.fleet.controller import FleetController
from fairgate.fleet.follow import StoreRoutes
from fairgate.limits import (
    Demand,
    LeaseRefresher,
    Limiter,
    Subject,
)
from fairgate.observability.auth_metrics import AuthMetrics
from fairgate.observability.dispatch_metrics import DispatchMetrics
from fairgate.observability.fairshare_metrics import FairShareMetrics
from fairgate.observability.jwt_metrics import JwtMetrics
from fairgate.observability.metrics import GatewayMetrics, ReplicaGauge
from fairgate.observability.routing_metrics import RoutingMetrics
from fairgate.observability.scim_metrics import ScimMetrics
from fairgate.observability.secret_metrics import SecretMetrics
from fairgate.proxy.admit import Admit
from fairgate.proxy.asgi import ProxyApp
from fairgate.proxy.dispatch import Dispatcher, PoolEngines
from fairgate.proxy.endpoints import EndpointTable
from fairgate.proxy.forward import Forwarder
from fairgate.proxy.identify import Identify
from fairgate.proxy.in_flight import InFlight
from fairgate.proxy.limit import Limit
from fairgate.proxy.me import me_handler
from fairgate.proxy.pipeline import Pipeline
from fairgate.proxy.read import Read
from fairgate.proxy.reclaim import Reclaimer
from fairgate.proxy.records import RecordBuilder
from fairgate.proxy.relay import Deadlines, Relay
from fairgate.proxy.request import Caps
from fairgate.proxy.reservation import OutputPolicy
from fairgate.proxy.responses import ResponseScope
from fairgate.proxy.salt import CacheSalter
from fairgate.proxy.settle import Settler
from fairgate.proxy.tags import TagPolicy
from fairgate.routing import Decision, strategy_for
from fairgate.server.request_ids import request_ids
from fairgate.state import (
    MemoryCounterStore,
    MemoryResponseOwners,
    RedisCounterStore,
    RedisNotices,
    RedisResponseOwners,
)
from fairgate.state.board import LocalInFlightBoard, RedisInFlightBoard
from fairgate.store import (
    PostgresChangeListener,
    Store,
    StoreChangeFeed,
    StoreKeyDirectory,
    access_changes,
    upgrade,
)
from fairgate.tenancy import (
    Tenancy,
    build_store,
    declared_teams,
    model_catalogue,
    redis_notices,
)
from fairgate.tenancy.runtime import key_hasher, redis_target
from fairgate.upstream import (
    Breaker,
    HealthChecker,
    MetricsScraper,
    Replica,
    ReplicaRegistry,
    UpstreamPool,
    UpstreamSessions,
)
from fairgate.upstream.pool_capacity import PoolCapacity
from fairgate.upstream.pool_members import PoolMembers, Seating
from fairgate.vault import refresher_for
from fairgate.web import build_web

if TYPE_CHECKING:
    from fairgate.scim import ScimParts

__all__ = ["Gateway"]

log = logging.getLogger("fairgate")


class Gateway:
    """Everything one gateway process runs, built from one Config."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.draining = False
        self._tasks: list[asyncio.Task[None]] = []
        limits = config.limits
        adapters: dict[str, EngineAdapter] = {
            kind: adapter_for(kind) for kind in sorted({m.engine for m in config.models})
        }
        # metrics first: _replica_gauges reads the registry only when scraped
        self.metrics = GatewayMetrics(replicas=self._replica_gauges)
        self.routing_metrics = RoutingMetrics(self.metrics.registry)
        clock = self.clock = SystemClock()
        self.decisions = DecisionRing(DECISIONS_KEPT, clock)  # the dashboard's last decisions
        observe, keep = self.routing_metrics.observe, self.decisions.observe

        def on_decision(decision: Decision) -> None:
            observe(decision)
            keep(decision)

        self.registry = ReplicaRegistry(
            self._replicas(config, adapters),
            strategies={m.name: strategy_for(m.routing) for m in config.models},
            on_decision=on_decision,
            log_decisions=config.routing.log_decisions,
            fair_share=config.routing.fair_share,
        )
        # Health checks and metric scrapes use aiohttp; requests use the lean pool.
        self.upstream_sessions = UpstreamSessions(connect_timeout=limits.connect_timeout)
        # Idle connections are dropped before the engines' own keep-alive timeout
        # (uvicorn's 5 s for vLLM), so a reused connection is rarely closed under us.
        self.pool = UpstreamPool(connect_timeout=limits.connect_timeout, idle_timeout=4.0)
        self.state = _state_store(config)
        self.responses = ResponseScope(
            _response_owners(config, self.state), config.cache_isolation.scope
        )
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
            self.responses,
        )
        # Tenancy: the store is opened in start(); nothing on the request path reads it
        # except a key-cache miss.
        self.store = build_store(config)
        self.fleet, self.placed_routes = self._fleet(config, adapters)
        self._fleet_server: grpc.aio.Server | None = None
        # Counters held in this process are saved to the store to survive a restart.
        journal = config.accounting.journal_path
        self.snapshots = (
            CounterSnapshots(
                self.store,
                self.state,
                clock,
                spare=journal / SNAPSHOT_SPARE if journal is not None else None,
            )
            if isinstance(self.state, MemoryCounterStore)
            else None
        )
        self.limiter = Limiter(
            self.state,
            fail_open=config.state.fail_open,
            day_zone=ZoneInfo(config.state.day_zone),
            on_unavailable=lambda outcome: self.metrics.state_unavailable.labels(outcome).inc(),
        )
        self.fairshare = _fairshare(config)
        # the one follower of the replicas joining and leaving routing: seats, C, and the
        # replicas admission, the dispatcher and the capacity learner read
        self.members = _pool_members(config, self.registry, self.fairshare)
        self.pool_capacity = _pool_capacity(config, self.fairshare, self.members, clock)
        bands = _bands(config)
        self.admission = self._admission(config, clock, bands, adapters)
        fair_requests = self.metrics.fairshare_requests
        self.dispatcher = self._dispatcher(config, clock)
        self.reclaimer = self._reclaimer(config)
        self.members.on_change(self._replicas_changed)
        self.alerter = _alerter(config, self.store, clock, self.metrics.alerts)
        self.budgets = BudgetKeeper(
            read=lambda: self.tenancy.budgets.book(),
            limiter=self.limiter,
            store=self.store,
            clock=clock,
            alerter=self.alerter,
            refresh=self.config.state.budget_refresh,
        )
        self.limit = Limit(
            limiter=self.limiter,
            budgets=self.budgets.current,
            prices=prices_by_model(config.models),
            clock=clock,
            on_soft_limit=self.budgets.on_soft_limit,
        )
        self.admit = Admit(
            pools={m.name: m.pool for m in config.models},
            classes={m.name: m.model_class for m in config.models},
            clock=clock,
            fairshare=self.fairshare,
            fairshare_state=self.state if self.fairshare is not None else None,
            admission=self.admission,
            bands=bands,
            send_priority=config.fairshare.send_priority,
            on_claim=lambda pool, org, borrowing: self.metrics.child(
                fair_requests, pool, org, "borrowing" if borrowing else "within_share"
            ).inc(),
            dispatcher=self.dispatcher,
            # the limiter's back end is the fair-share state: claims ride with the limits
            claims_ride=True,
        )
        self.endpoints = EndpointTable(
            config.models, adapters, local={"/me": me_handler(self.limit, self.admit)}
        )
        # borrowing requests hold nothing in Redis: each gateway publishes its own counts
        self.fleet_board = (
            RedisInFlightBoard(self.state, self.admit.fairshare_counts)
            if isinstance(self.state, RedisCounterStore)
            else LocalInFlightBoard(self.admit.fairshare_counts)
        )
        self.fairshare_monitor = (
            FairShareMonitor(
                self.fairshare,
                self.state,
                clock,
                self.admit.fairshare_counts,
                learned=self.pool_capacity.learned if self.pool_capacity else None,
                placed=self.members.following(),
                fleet=self.fleet_board.totals,
                gateways=lambda: self.fleet_board.gateways,
            )
            if self.fairshare is not None
            else None
        )
        self.fairshare_metrics = (
            FairShareMetrics(self.fairshare_monitor, self.metrics.registry)
            if self.fairshare_monitor is not None
            else None
        )
        hasher = key_hasher(config)
        self.tenancy = Tenancy(
            self.store,
            models=model_catalogue(config),
            declared_teams=declared_teams(config.orgs),
            hasher=hasher,
            public_url=config.public_url,
        )
        # Web accounts (sign-up, sign-in, sessions): argon2 runs in its own bounded pool.
        alerts = self.metrics.alerts
        self.signup_notices = SignUpNotices(
            self.store,
            self.alerter.delivery,
            clock,
            on_sent=lambda channel: alerts.labels(channel, "sent").inc(),
            on_failed=lambda channel: alerts.labels(channel, "failed").inc(),
        )
        self.front_door = build_accounts(
            config.accounts,
            self.store,
            self.tenancy,
            clock,
            state=self.state,
            fail_open=config.state.fail_open,
            notifier=self.signup_notices,
        )
        self.accounts, self.sessions = self.front_door.accounts, self.front_door.sessions
        a = config.auth
        auth_metrics = AuthMetrics(self.metrics.registry)
        self.key_cache = KeyCache(
            a.key_cache_size, a.key_cache_ttl, a.miss_cache_size, a.miss_cache_ttl, clock
        )
        # Withdrawn access reaches this process through the store's feed (and Redis, when
        # configured) within change_poll_interval; the cache TTL is only the backstop.
        self.notices = redis_notices(config, self.store)
        self.change_watcher = ChangeWatcher(
            StoreChangeFeed(self.store),
            self.key_cache,
            clock,
            interval=a.change_poll_interval,
            wakers=_wakers(self.store, self.notices),
            on_applied=auth_metrics.changes_applied,
            on_failed=auth_metrics.change_read_failed,
            # then the requests in flight of the changed subjects are checked again
            on_changes=lambda rows: self.in_flight.changed(rows),
        )
        # a change committed by this process (admin API) is read at once, not at the next poll
        self.store.on_commit(access_changes.TOPIC, _wake(self.change_watcher))
        self.authenticator = Authenticator(
            StoreKeyDirectory(self.store),
            self.key_cache,
            _guard(config, clock, auth_metrics, "client", self.state),
            ModelResolver({n: m.name for m in config.models for n in (m.name, *m.aliases)}),
            clock,
            hasher,
        )
        # Access tokens (jwt:): a JWS-shaped bearer is verified, anything else is a key.
        self.key_sources: list[KeySource] = []
        authenticate: Callable[[bytes | None, str], Awaitable[Principal]]
        authenticate = self.authenticator.authenticate
        self.exchanger: Exchanger | None = None
        if config.jwt is not None:
            authenticate, self.exchanger = self._tokens(config.jwt, clock)
        # requests in flight whose credential stops being valid are cut (proxy.in_flight)
        self.in_flight = InFlight(authenticate)
        self.clients = ClientAddresses(NetworkSet(map(parse_network, config.trusted_proxies)))
        rules = _route_rules(config)
        accounted = self.metrics.accounting
        journal_path, acc = config.accounting.journal_path, config.accounting
        self.recorder = Recorder(
            StoreUsageWriter(self.store),
            capacity=config.accounting.queue_capacity,
            on_written=lambda n: accounted.labels("written").inc(n),
            on_dropped=lambda n: accounted.labels("dropped").inc(n),
            on_failed=lambda n: accounted.labels("failed").inc(n),
            on_spilled=lambda n: accounted.labels("spilled").inc(n),
            journal=Journal(journal_path, max_bytes=acc.journal_max_bytes)
            if journal_path is not None
            else None,
        )
        self.pruner = (
            Pruner(self.store, retention=acc.retention, clock=clock)
            if acc.retention is not None
            else None
        )
        recorder = self.recorder
        self.metrics.watch_accounting(lambda: (recorder.stats.queued, recorder.stats.duplicates))
        records = RecordBuilder(
            self.recorder.record,
            {m.name: m.pool for m in config.models},
            intend=self.recorder.intend,
            retire=self.recorder.retire,
        )
        settler = Settler(
            self.metrics,
            prices=prices_by_model(config.models),
            leave=(self.admit.leave, self.limit.leave, self.admit.finish),
            record=records,
            intend=records.intend,
        )
        self.pipeline = Pipeline(
            read=Read(
                self.endpoints,
                Caps(
                    max_body_bytes=limits.max_body_bytes,
                    body_timeout=limits.client_body_timeout,
                    max_n=limits.max_n,
                    max_grammar_bytes=limits.max_grammar_bytes,
                ),
                _output_policy(config),
                tags=TagPolicy(
                    config.tags.max_per_request,
                    frozenset(config.tags.allowed),
                    {o.name: frozenset(o.tags) for o in config.orgs},
                    config.tags.header,
                ),
                salt=_salter(config),
                session_header=config.routing.session_header.encode("latin-1"),
                responses=self.responses,
            ),
            identify=Identify(authenticate, rules),
            forwarder=Forwarder(
                relay=self.relay,
                registry=self.registry,
                settler=settler,
                retries=config.proxy.retries,
                limit=self.limit,
                reclaim=self.reclaimer,
            ),
            settler=settler,
            request_ids=request_ids(),
            stopping=lambda: self.draining,
            exchange=self.exchanger.exchange if self.exchanger is not None else None,
            limit=self.limit,
            admit=self.admit,
            clients=self.clients,
            in_flight=self.in_flight,
        )
        self.proxy_app = ProxyApp(
            self.pipeline,
            build_web(
                config,
                clients=self.clients,
                rules=rules,
                tenancy=self.tenancy,
                accounts=self.accounts,
                sessions=self.sessions,
                clock=clock,
            ),
        )
        master = config.master_key_file
        metrics_token = config.metrics_token_file
        board, self.share_history = build_board(
            models=[(m.name, m.pool) for m in config.models],
            registry=self.registry,
            decisions=self.decisions,
            clock=clock,
            monitor=self.fairshare_monitor,
            admission=self.admission,
        )
        admin_guard = _guard(config, clock, auth_metrics, "admin", self.state)
        self.scim: ScimParts | None = None
        if config.scim is not None:
            # Imported only when configured: scim2-server's models are a third of the
            # gateway's import time, paid at every start of every process.
            from fairgate.scim import build_scim

            self.scim = build_scim(
                config.scim,
                store=self.store,
                audit=self.tenancy.audit,
                guard=admin_guard,
                clock=clock,
                metrics=ScimMetrics(self.metrics.registry),
            )
        self.admin_app = build_admin_app(
            tenancy=self.tenancy,
            master_key_sha256=sha256(master.read()) if master is not None else None,
            master_key_changes=master.cell if master is not None and master.vault else None,
            guard=admin_guard,
            registry=self.metrics.registry,
            models_ready=self.registry.ready,
            draining=lambda: self.draining,
            fairshare=self.fairshare_monitor,
            health_details=lambda: {
                "state": {
                    "backend": config.state.backend,
                    "available": self.state_available,
                }
            },
            clients=self.clients,
            rules=rules,
            metrics_token_sha256=sha256(metrics_token.read()) if metrics_token else None,
            metrics_token_changes=(
                metrics_token.cell if metrics_token is not None and metrics_token.vault else None
            ),
            dashboard=board,
            sessions=self.sessions,
            sso=SsoClient(config.sso, self.store, clock) if config.sso is not None else None,
            scim=self.scim.asgi if self.scim is not None else None,
            fleet=self.fleet,
        )
        self.metrics.state_available.set_function(lambda: float(self.state_available))
        # Vault secrets were read before this; the refresher reads them again every cache_ttl.
        # (the vault metrics exist only with a vault: a 0 gauge would read as an outage)
        self.secrets = (
            refresher_for(config, SecretMetrics(self.metrics.registry)) if config.vault else None
        )
        self.health = HealthChecker(
            self.registry,
            self.upstream_sessions,
            interval=config.health.interval,
            timeout=config.health.timeout,
            unhealthy_after=config.health.unhealthy_after,
            healthy_after=config.health.healthy_after,
        )
        self.scraper = MetricsScraper(
            self.registry,
            self.upstream_sessions,
            interval=config.health.interval,
            timeout=config.health.timeout,
            stale_after=3 * config.health.interval,
        )

    @staticmethod
    def _replicas(config: Config, adapters: dict[str, EngineAdapter]) -> list[Replica]:
        """One replica per upstream; an internal key held in a vault follows each new value
        read there (the header builder reads ``internal_key``, so the next request has it)."""
        b = config.breaker
        replicas = []
        for model in config.models:
            for upstream in model.upstreams:
                replica = Replica(
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
                if upstream.key_file is not None and upstream.key_file.vault is not None:
                    upstream.key_file.cell.on_change(partial(setattr, replica, "internal_key"))
                replicas.append(replica)
        return replicas

    def _fleet(
        self, config: Config, adapters: dict[str, EngineAdapter]
    ) -> tuple[FleetController | None, StoreRoutes | None]:
        """The control plane, with ``control_plane:``: the replicas it places join
        ``self.registry`` with the breaker settings of the static ones. Without it, but
        with ``deploy:`` models, the routes to the replicas the store holds (placed by a
        control plane elsewhere on the same store)."""
        deployed = any(m.deploy is not None for m in config.models)
        if config.control_plane is None and not deployed:
            return None, None
        b = config.breaker

        def make_replica(model: Model, name: str, url: str) -> Replica:
            key = model.deploy.key_file if model.deploy is not None else None
            return Replica(
                name=name,
                model=model.name,
                url=url,
                weight=1,
                internal_key=key.read() if key is not None else None,
                adapter=adapters[model.engine],
                breaker=Breaker(
                    failures=b.failures,
                    backoff_initial=b.backoff_initial,
                    backoff_max=b.backoff_max,
                ),
            )

        if config.control_plane is None:
            return None, StoreRoutes(config.models, self.store, self.registry, make_replica)
        controller = FleetController(
            config.control_plane, config.models, self.store, self.registry, make_replica
        )
        return controller, None

    async def _start_fleet(self) -> None:
        if self.placed_routes is not None:
            log.info("deploy: models routed to the replicas the store holds (no control_plane)")
            self._tasks.append(asyncio.create_task(self.placed_routes.run()))
        if self.fleet is None:
            return
        assert self.config.control_plane is not None
        tls = self.config.control_plane.tls
        credentials = server_credentials(
            tls.cert_file.read().encode(),
            tls.key_file.read().encode(),
            tls.client_ca_file.read().encode(),
        )
        await self.fleet.load()
        self._fleet_server = await self.fleet.serve(credentials)
        self._tasks.append(asyncio.create_task(self.fleet.run()))

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
        then start the background tasks (health checks, metric scrapes). Raises
        ``ConfigError`` before opening anything when the usage-record journal's directory
        cannot be created or written."""
        self._open_journal()
        await self.store.connect()
        revision = await upgrade(self.store)
        report = await self.tenancy.sync_orgs(self.config.orgs)
        log.info("store at schema %s; organisations %s", revision, report)
        if self.scim is not None:
            await self.scim.storage.reconcile()
        if self.snapshots is not None:
            restored = await self.snapshots.restore()
            log.info("rate counters: %d restored from the last snapshot", restored)
        await self.change_watcher.start()
        if isinstance(self.state, RedisCounterStore):
            await self.state.warn_of_eviction()
        self._token_retries: list[asyncio.Task[None]] = []
        await self._start_tokens()
        replayed = await self.recorder.open()  # before budgets restore spend from the records
        if replayed:
            log.info("accounting: %d records of an earlier process replayed", replayed)
        await self.budgets.start()
        self.recorder.start()
        self.alerter.start()
        self.health.start()
        self.scraper.start()
        if self.pool_capacity is not None:
            self.pool_capacity.start(self.config.health.interval)
        self._tasks = [
            asyncio.create_task(LeaseRefresher(self.state, self.clock).run()),
            asyncio.create_task(self.budgets.run(self.config.state.budget_refresh)),
            asyncio.create_task(self.change_watcher.run()),
            asyncio.create_task(self.in_flight.run()),
            asyncio.create_task(self.signup_notices.resend_missed()),
            asyncio.create_task(self.front_door.prune_sessions(every=3600.0)),
            *(asyncio.create_task(c.run()) for c in self.admission.values()),
        ]
        self._tasks.extend(self._token_retries)
        if self.dispatcher is not None:
            self._tasks.append(asyncio.create_task(self.dispatcher.run()))
        if self.reclaimer is not None:
            self._tasks.append(asyncio.create_task(self.reclaimer.run()))
        if self.fairshare is not None:
            self._tasks.append(asyncio.create_task(self.fleet_board.run()))
        if self.fairshare_metrics is not None:
            interval = self.config.health.interval
            self._tasks.append(asyncio.create_task(self.fairshare_metrics.run(interval)))
        if self.share_history is not None:
            self._tasks.append(asyncio.create_task(self.share_history.run()))
        if self.snapshots is not None:
            every = self.config.state.snapshot_interval
            self._tasks.append(asyncio.create_task(self.snapshots.run(every)))
        if self.secrets is not None:
            self._tasks.append(asyncio.create_task(self.secrets.run()))
        if self.pruner is not None:
            self._tasks.append(asyncio.create_task(self.pruner.run(every=3600.0)))
        await self._start_fleet()

    def _open_journal(self) -> None:
        try:
            self.recorder.open_journal()
        except OSError as exc:
            path = self.config.accounting.journal_path
            reason = exc.strerror or type(exc).__name__
            message = (
                f"accounting.journal_path: the journal directory {path} cannot be created or "
                f"written ({reason}); give the gateway a writable directory (a Kubernetes "
                "emptyDir, a systemd StateDirectory) or set it to null to run without a journal"
            )
            raise ConfigError([Diagnostic.at(Mark(str(self.config.path), 0, 0), message)]) from None

    def _tokens(
        self, block: Jwt, clock: SystemClock
    ) -> tuple[Callable[[bytes | None, str], Awaitable[Principal]], Exchanger | None]:
        """The token-aware authenticate and the exchanger of a ``jwt:`` block."""
        metrics = JwtMetrics(self.metrics.registry)
        limits = Limits(rpm=block.rpm, tpm=block.tpm, max_in_flight=block.max_inflight)

        def source(issuer: str, jwks_url: str | None) -> KeySource:
            made = KeySource(
                issuer,
                jwks_url=jwks_url,
                min_refresh=block.min_refresh,
                clock=clock,
                on_fetch=metrics.fetched,
            )
            self.key_sources.append(made)
            return made

        verifier = TokenVerifier(
            source(block.issuer, block.jwks_url),
            audience=block.audience,
            skew=block.clock_skew,
            clock=clock,
            typ=block.type,
        )
        tokens = TokenAuthenticator(
            self.authenticator,
            verifier,
            block.map,
            self.tenancy.people,
            self.key_cache,
            clock,
            limits=limits,
            on_refused=metrics.refused,
        )
        exchanger = None
        if block.exchange:
            issuers = [
                ExchangeIssuer(
                    TokenVerifier(
                        source(e.issuer, e.jwks_url),
                        audience=e.audience,
                        skew=block.clock_skew,
                        clock=clock,
                        typ=e.type,
                    ),
                    e.map,
                    e.key_ttl,
                    e.max_keys,
                    e.exchanges_per_minute,
                )
                for e in block.exchange
            ]
            people = self.tenancy.people
            limiter = self.limiter

            async def throttle(key_id: str, per_minute: int) -> None:
                # a counter of its own per identity (not the key's requests per minute)
                subject = Subject(EXCHANGE_COUNTER + key_id, "", "")
                demand = Demand(subject, Limits(rpm=per_minute), "", 1, Money(0))
                await limiter.admit(demand, clock.wall())

            exchanger = Exchanger(
                issuers,
                self.authenticator,
                people,
                lambda key_id, ttl, keep: people.exchange_key(key_id, ttl=ttl, keep=keep),
                limits=limits,
                throttle=throttle,
                on_refused=metrics.refused,
                on_exchanged=metrics.exchanged,
            )
        return tokens.authenticate, exchanger

    async def _start_tokens(self) -> None:
        """Discovery and the first key set of every access-token issuer: one that does not
        answer stops the start-up (``ProviderUnavailable``), or with ``optional_at_start``
        is retried in the background while its tokens are refused."""
        block = self.config.jwt
        for source in self.key_sources:
            try:
                await source.start()
            except ProviderUnavailable as exc:
                if block is None or not block.optional_at_start:
                    raise ProviderUnavailable(f"issuer {source.issuer}: {exc}") from None
                log.warning(
                    "jwt: issuer %s does not answer (%s); its tokens are refused until it does",
                    source.issuer,
                    exc,
                )
                self._token_retries.append(asyncio.create_task(_retry_source(source)))
            else:
                log.info("jwt: the keys of issuer %s are read", source.issuer)

    async def stop(self) -> None:
        """Stop background tasks and close upstream connections."""
        if self._fleet_server is not None:
            # the agents' streams end now; they dial again and find the next process
            await self._fleet_server.stop(grace=1.0)
        if self.fleet is not None:
            await self.fleet.release()  # a standby takes over without waiting for expiry
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.health.stop()
        await self.scraper.stop()
        if self.pool_capacity is not None:
            await self.pool_capacity.stop()
        await self.upstream_sessions.close()
        await self.pool.close()
        if self.secrets is not None:
            await self.secrets.close()
        # Every record queued so far reaches the store before it closes (SIGTERM loses none).
        if not await self.recorder.drain(timeout=30.0):
            log.error("accounting: some usage records could not be written at shutdown")
        await self.front_door.aclose()
        await self.alerter.stop(timeout=10.0)
        await self._save_counters()
        await self.state.aclose()
        if self.notices is not None:
            await self.notices.aclose()
        await self.store.close()

    async def _save_counters(self) -> None:
        """A last snapshot of the memory back end's counters: a graceful stop loses none."""
        if self.snapshots is None:
            return
        try:
            await self.snapshots.save()
        except StoreUnavailable as exc:
            log.error("rate counters not saved at shutdown (store unavailable): %s", exc)

    @property
    def state_available(self) -> bool:
        """False while the state back end failed its last call, for limits or fair share."""
        return self.limit.available and self.admit.available

    def _replicas_changed(self, group: str) -> None:
        """A pool's replicas changed (the fleet routed or removed one): who waits in its
        admission queue or its dispatcher is looked at now, not at the next re-check."""
        controller = self.admission.get(group)
        if controller is not None:
            controller.recheck()
        if self.dispatcher is not None:
            self.dispatcher.freed(group)

    def _reclaimer(self, config: Config) -> Reclaimer | None:
        """Borrowers preempted for an owner waiting for its seats (``fairshare.reclaim_after``;
        null: off)."""
        after = config.fairshare.reclaim_after
        if self.fairshare is None or after is None:
            return None
        preemptions = self.metrics.fairshare_preemptions
        return Reclaimer(
            after,
            on_preempt=lambda pool, org: self.metrics.child(preemptions, pool, org).inc(),
        )

    def _dispatcher(self, config: Config, clock: SystemClock) -> Dispatcher | None:
        """Borrowers held while their pool is full (``fairshare.hold_borrowers``), each
        replica's batch capacity learned from its ``running`` from its seats upwards."""
        f = config.fairshare
        if self.fairshare is None or not f.hold_borrowers:
            return None
        pools = {}
        for pool in config.pools:
            tracker = CapacityTracker(1)
            self.members.follow(pool.name, tracker)  # from its seats, at least 1
            pools[pool.name] = PoolEngines(self.members.snapshots(pool.name), tracker)
        return Dispatcher(
            pools,
            ranks=lambda pool, orgs: self.admit.ranks_now(pool, orgs),
            clock=clock,
            queue_size=f.queue_size,
            queue_ttl=f.queue_ttl,
            depth=None if f.engine_queue_depth == "auto" else f.engine_queue_depth,
            observer=DispatchMetrics(self.metrics.registry),
        )

    def _admission(
        self,
        config: Config,
        clock: SystemClock,
        bands: Bands | None,
        adapters: dict[str, EngineAdapter],
    ) -> dict[str, AdmissionController]:
        """One admission controller per pool (a model without a pool is its own), when
        bands are configured; none otherwise."""
        if bands is None:
            return {}
        a = config.admission
        members: dict[str, list[Model]] = {}
        for m in config.models:
            members.setdefault(m.pool or m.name, []).append(m)
        controllers = {}
        for pool, models in members.items():
            tracker = CapacityTracker(a.replica_capacity or 1)
            self.members.follow(pool, tracker, a.replica_capacity)
            detector = SaturationDetector(
                self.members.snapshots(pool), tracker, clock, kv_limit=a.kv_limit
            )
            takes_priority = config.fairshare.send_priority and all(
                adapters[m.engine].sends_priority for m in models
            )
            controllers[pool] = AdmissionController(
                pool,
                bands,
                queue_size=a.queue_size,
                queue_ttl=a.queue_ttl,
                clock=clock,
                saturation_fn=detector,
                observer=self.metrics.admission,
                # engines without a priority scheduler get the fair-share order here
                order_by_priority=not takes_priority,
            )
        return controllers


def _wake(watcher: ChangeWatcher) -> Callable[[], Awaitable[None]]:
    async def wake() -> None:
        watcher.wake()

    return wake


async def _retry_source(source: KeySource) -> None:
    """Ask an issuer that did not answer at start-up again, backing off up to a minute."""
    wait = 1.0
    while not source.ready:
        await asyncio.sleep(wait)
        try:
            await source.start()
        except ProviderUnavailable as exc:
            log.warning("jwt: issuer %s still does not answer: %s", source.issuer, exc)
            wait = min(wait * 2, 60.0)
        else:
            log.info("jwt: issuer %s answers now; its tokens are verified", source.issuer)


def _alerter(config: Config, store: Store, clock: SystemClock, counter: Counter) -> Alerter:
    """Soft-limit alerts to the configured webhook and/or SMTP relay (secrets read once from
    files; a vault's followed)."""
    hook, mail = config.alerts.webhook, config.alerts.smtp
    webhook = (
        None
        if hook is None
        else WebhookTarget(
            hook.url,
            token=hook.token_file.read().strip() if hook.token_file else None,
            timeout=hook.timeout,
        )
    )
    smtp = (
        None
        if mail is None
        else SmtpTarget(
            mail.host,
            sender=mail.sender,
            recipients=tuple(mail.recipients),
            port=mail.port,
            starttls=mail.starttls,
            username=mail.username,
            password=mail.password_file.read().strip() if mail.password_file else None,
            timeout=mail.timeout,
        )
    )
    alerter = Alerter(
        store,
        webhook=webhook,
        smtp=smtp,
        clock=clock,
        on_sent=lambda channel: counter.labels(channel, "sent").inc(),
        on_failed=lambda channel: counter.labels(channel, "failed").inc(),
        on_dropped=lambda reason: counter.labels("any", reason).inc(),
    )
    if hook is not None and hook.token_file is not None and hook.token_file.vault:
        hook.token_file.cell.on_change(alerter.use_webhook_token)
    if mail is not None and mail.password_file is not None and mail.password_file.vault:
        mail.password_file.cell.on_change(alerter.use_smtp_password)
    return alerter


def _route_rules(config: Config) -> RouteRules:
    """The networks of every route class with a rule (``allow: null`` has none)."""
    classes: tuple[RouteClass, ...] = ("inference", "web", "admin", "metrics", "health")
    allow = {name: getattr(config.routes, name).allow for name in classes}
    return RouteRules(
        {
            name: NetworkSet(map(parse_network, networks))
            for name, networks in allow.items()
            if networks is not None
        }
    )


def _guard(
    config: Config,
    clock: Clock,
    metrics: AuthMetrics,
    listener: str,
    state: MemoryCounterStore | RedisCounterStore,
) -> AuthGuard:
    """One listener's own failure limits and lookup ceiling (never shared between listeners);
    with Redis, the failures are counted across every gateway too."""
    a = config.auth
    failures = FailureLimiter(
        a.failures_per_minute,
        clock,
        max_networks=a.failure_networks_max,
        ipv4_24=a.failures_per_minute_ipv4_24,
        ipv6_48=a.failures_per_minute_ipv6_48,
        ipv6_32=a.failures_per_minute_ipv6_32,
    )
    ceiling = LookupCeiling(a.lookups_per_minute, clock)
    shared = (
        SharedFailures(state, listener, failures, clock)
        if isinstance(state, RedisCounterStore) and failures.enabled
        else None
    )
    return AuthGuard(failures, ceiling, metrics.for_listener(listener), shared)


def _wakers(store: Store, notices: RedisNotices | None) -> list[Waker]:
    """What wakes the change watcher before its next poll: LISTEN on PostgreSQL, Redis."""
    wakers: list[Waker] = []
    if store.dialect == "postgresql":
        wakers.append(PostgresChangeListener(store))
    if notices is not None:
        wakers.append(notices)
    return wakers


def _state_store(config: Config) -> MemoryCounterStore | RedisCounterStore:
    st = config.state
    if st.backend == "redis":
        return RedisCounterStore(
            redis_target(config),
            prefix=st.prefix,
            timeout=st.timeout,
            lease_ttl=st.lease_ttl,
            wait_timeout=st.wait_timeout,
        )
    return MemoryCounterStore()


def _response_owners(
    config: Config, state: MemoryCounterStore | RedisCounterStore
) -> MemoryResponseOwners | RedisResponseOwners:
    """Who received each Responses API id, beside the counters (shared with Redis)."""
    ttl = config.state.response_ttl
    if isinstance(state, RedisCounterStore):
        return RedisResponseOwners(state, ttl)
    return MemoryResponseOwners(ttl)


def _fairshare(config: Config) -> FairShare | None:
    """The fair-share policy over the declared pools; None without pools."""
    if not config.pools:
        return None
    shares = {o.name: o.share for o in config.orgs}
    return FairShare(
        {p.name: p.start for p in config.pools},
        {p.name: shares for p in config.pools},
        config.fairshare.half_life,
        {o.name: o.team_shares for o in config.orgs if o.team_shares},
    )


def _pool_members(
    config: Config, registry: ReplicaRegistry, policy: FairShare | None
) -> PoolMembers:
    """Each pool's replicas as routing has them (a model without a pool is its own group);
    each replica of a pool gets its part of the pool's capacity C by weight among every
    replica the pool is meant to have (a ``deploy:`` model's wanted replicas weigh 1 each):
    the requests it runs without preemption, which fair-share routing fills first. A pool
    of fixed capacity with ``deploy:`` models has as C the seats of its routed replicas."""
    seating = {}
    for pool in config.pools:
        models = [m for m in config.models if m.pool == pool.name]
        seating[pool.name] = Seating(
            pool.start,
            wanted_weight=sum(
                sum(u.weight for u in m.upstreams) + (m.deploy.replicas if m.deploy else 0)
                for m in models
            ),
            follows=not pool.learned and any(m.deploy is not None for m in models),
            learned=pool.learned,
        )
    groups = {m.name: m.pool or m.name for m in config.models}
    return PoolMembers(registry, groups, seating, policy)


def _pool_capacity(
    config: Config, policy: FairShare | None, members: PoolMembers, clock: Clock
) -> PoolCapacity | None:
    """A learner for each pool of ``capacity: auto``; None when there is none."""
    learned = [p for p in config.pools if p.learned]
    if policy is None or not learned:
        return None
    pools = {}
    for pool in learned:
        assert pool.capacity_min is not None and pool.capacity_max is not None
        kv_limit, rise_after = pool.capacity_kv_limit, pool.capacity_rise_after
        learner = CapacityLearner(
            pool.capacity_min,
            pool.capacity_max,
            kv_limit=DEFAULT_KV_LIMIT if kv_limit is None else kv_limit,
            rise_after=DEFAULT_RISE_AFTER if rise_after is None else rise_after,
            # metrics unknown this long (the scraper's stale_after): the replica drops out
            hold=3 * config.health.interval,
        )
        pools[pool.name] = (learner, members.replicas(pool.name))  # live: follows the fleet
    return PoolCapacity(policy, pools, clock=clock.monotonic)


def _bands(config: Config) -> Bands | None:
    a = config.admission
    if not a.bands:
        return None
    return Bands(
        [(b.name, b.ceiling) for b in a.bands],
        default=a.default_band,
        teams={team: b.name for b in a.bands for team in b.teams},
    )


def _salter(config: Config) -> CacheSalter:
    iso = config.cache_isolation
    if iso.scope == "none":
        return CacheSalter("none", b"")
    if iso.key_file is not None:
        salter = CacheSalter(iso.scope, iso.key_file.read().encode())
        if iso.key_file.vault is not None:
            iso.key_file.cell.on_change(lambda key: salter.rekey(key.encode()))
        return salter
    log.warning(
        "cache_isolation.key_file is not set: this process salts with a random key, so "
        "gateway processes do not share cached prefixes of the same tenant"
    )
    return CacheSalter(iso.scope, os.urandom(32))


def _output_policy(config: Config) -> OutputPolicy:
    """Each model's output ceiling (its own ``max_tokens`` and ``limits.max_tokens``, the
    smaller) and the defaults of ``limits``."""
    limits = config.limits

    def ceiling(model_cap: int | None) -> int | None:
        caps = [c for c in (model_cap, limits.max_tokens) if c is not None]
        return min(caps) if caps else None

    return OutputPolicy(
        ceilings={m.name: ceiling(m.max_tokens) for m in config.models},
        default=limits.default_max_tokens,
        assumed=config.state.default_completion_tokens,
        max_prompts=limits.max_prompts,
    )
