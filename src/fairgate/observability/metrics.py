"""The gateway's Prometheus metric families, built once per Gateway on its own registry.

Label children are cached per (model, route, …) so the hot path pays a dict
lookup and an ``inc``/``observe``, never a label resolution (the settle stage pays one
lookup for all the children a request writes: ``observability.settled_metrics``); the
families the request path writes count without a lock (``observability.loop_metrics``).
Replica state (health, in-flight, breaker) is not pushed on every change: a collector
reads it from the registry when ``/metrics`` is scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fairgate.observability.loop_metrics import LoopCounter, LoopGauge, LoopHistogram
from fairgate.observability.settled_metrics import SettledMetrics

__all__ = ["AdmissionMetrics", "GatewayMetrics", "ReplicaGauge"]

# Latency buckets for end-to-end and first-token times (seconds).
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# The gateway's own added time is sub-millisecond when healthy.
_OVERHEAD = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)

# (model, replica, healthy, in_flight, breaker_open)
ReplicaGauge = tuple[str, str, bool, int, bool]


class _ReplicaCollector(Collector):
    def __init__(self, read: Callable[[], Iterable[ReplicaGauge]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        healthy = GaugeMetricFamily(
            "fairgate_upstream_healthy",
            "1 when the replica passes health checks",
            labels=["model", "replica"],
        )
        in_flight = GaugeMetricFamily(
            "fairgate_upstream_in_flight",
            "Requests the gateway has in flight on the replica",
            labels=["model", "replica"],
        )
        breaker = GaugeMetricFamily(
            "fairgate_upstream_breaker_open",
            "1 while the replica's circuit breaker is open",
            labels=["model", "replica"],
        )
        for model, replica, ok, count, is_open in self._read():
            healthy.add_metric([model, replica], 1.0 if ok else 0.0)
            in_flight.add_metric([model, replica], float(count))
            breaker.add_metric([model, replica], 1.0 if is_open else 0.0)
        yield healthy
        yield in_flight
        yield breaker

    def describe(self) -> Iterator[Metric]:
        return iter(())


class _AccountingCollector(Collector):
    def __init__(self, read: Callable[[], tuple[int, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        queued, duplicates = self._read()
        yield GaugeMetricFamily(
            "fairgate_accounting_queue",
            "Usage records waiting to be written to the store",
            value=float(queued),
        )
        yield CounterMetricFamily(
            "fairgate_accounting_duplicates",
            "Usage records a retried batch found already stored (counted once, never twice)",
            value=float(duplicates),
        )

    def describe(self) -> Iterator[Metric]:
        return iter(())


class AdmissionMetrics:
    """The admission controllers' observer (``fairgate.admission.AdmissionObserver``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._depth = LoopGauge(
            "fairgate_admission_queue_depth",
            "Requests waiting for admission, by pool and band",
            ["pool", "band"],
            registry=registry,
        )
        self._wait = LoopHistogram(
            "fairgate_admission_wait_seconds",
            "Time admitted requests waited in the admission queue",
            ["pool", "band"],
            buckets=(0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self._rejected = Counter(
            "fairgate_admission_rejections",
            "Requests admission refused, by pool, band and reason (queue_full, queue_timeout)",
            ["pool", "band", "reason"],
            registry=registry,
        )
        self._saturation = LoopGauge(
            "fairgate_pool_saturation",
            "Pool saturation as admission last read it (1.0 = every batch slot taken)",
            ["pool"],
            registry=registry,
        )
        # label children by (pool, band) and pool: every admitted request reports its wait
        # and the saturation, so each is looked up here once, not built per request
        self._waits: dict[tuple[str, str], Any] = {}
        self._depths: dict[tuple[str, str], Any] = {}
        self._saturations: dict[str, Any] = {}

    def queue_depth(self, pool: str, band: str, depth: int) -> None:
        child = self._depths.get((pool, band))
        if child is None:
            child = self._depths[(pool, band)] = self._depth.labels(pool, band)
        child.set(depth)

    def admitted(self, pool: str, band: str, waited: float) -> None:
        child = self._waits.get((pool, band))
        if child is None:
            child = self._waits[(pool, band)] = self._wait.labels(pool, band)
        child.observe(waited)

    def rejected(self, pool: str, band: str, reason: Any) -> None:
        self._rejected.labels(pool, band, str(reason)).inc()

    def saturation(self, pool: str, value: float) -> None:
        child = self._saturations.get(pool)
        if child is None:
            child = self._saturations[pool] = self._saturation.labels(pool)
        child.set(value)


class GatewayMetrics:
    """Every metric family of one Gateway, on a private ``CollectorRegistry``."""

    def __init__(self, replicas: Callable[[], Iterable[ReplicaGauge]] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = LoopCounter(
            "fairgate_requests",
            "Client requests by model, route and status",
            ["model", "route", "status"],
            registry=r,
        )
        self.duration = LoopHistogram(
            "fairgate_request_duration_seconds",
            "Time from request arrival to the last byte sent",
            ["model", "route"],
            buckets=_LATENCY,
            registry=r,
        )
        self.ttft = LoopHistogram(
            "fairgate_ttft_seconds",
            "Time from request arrival to the first byte sent to the client",
            ["model"],
            buckets=_LATENCY,
            registry=r,
        )
        self.tokens = LoopCounter(
            "fairgate_tokens",
            "Tokens by model and kind (prompt, completion, cached)",
            ["model", "kind"],
            registry=r,
        )
        self.usage_estimated = LoopCounter(
            "fairgate_usage_estimated",
            "Requests whose usage was estimated (no usage from the engine)",
            ["model"],
            registry=r,
        )
        self.retries = LoopCounter(
            "fairgate_upstream_retries",
            "Upstream attempts beyond the first, by model",
            ["model"],
            registry=r,
        )
        self.fallbacks = LoopCounter(
            "fairgate_fallbacks",
            "Requests served by a fallback model",
            ["model", "fallback"],
            registry=r,
        )
        self.upstream_errors = LoopCounter(
            "fairgate_upstream_errors",
            "Failed upstream attempts by replica and reason",
            ["replica", "reason"],
            registry=r,
        )
        self.denials = LoopCounter(
            "fairgate_denials",
            "Requests the gateway refused itself, by reason",
            ["reason"],
            registry=r,
        )
        self.stream_aborts = LoopCounter(
            "fairgate_stream_aborts",
            "Streams ended early, by reason",
            ["reason"],
            registry=r,
        )
        self.overhead = LoopHistogram(
            "fairgate_overhead_seconds",
            "Time the gateway itself added to a request (total minus time waiting on the upstream)",
            buckets=_OVERHEAD,
            registry=r,
        )
        self.accounting = Counter(
            "fairgate_accounting_records",
            "Usage records by result: written, spilled (kept in the journal to write later), "
            "dropped (queue full and not journaled, store failing twice, or "
            "shutdown), failed (batch write attempts that failed)",
            ["result"],
            registry=r,
        )
        self.streams_open = LoopGauge(
            "fairgate_streams_open",
            "Streams currently relayed to clients",
            registry=r,
        )
        self.state_unavailable = Counter(
            "fairgate_limits_state_unavailable",
            "Requests met while the limits state back end was unreachable, by what happened: "
            "refused (503), served_without_limits (fail_open), settle_lost (a correction lost)",
            ["outcome"],
            registry=r,
        )
        self.state_available = Gauge(
            "fairgate_state_available",
            "1 unless the last call to the state back end (limits, budgets, fair share) failed",
            registry=r,
        )
        self.fairshare_requests = LoopCounter(
            "fairgate_fairshare_requests",
            "Requests given a fair-share priority, by pool, organisation and kind "
            "(within_share, borrowing)",
            ["pool", "org", "kind"],
            registry=r,
        )
        self.fairshare_preemptions = LoopCounter(
            "fairgate_fairshare_preemptions",
            "Borrowing requests the gateway preempted for an owner waiting for its seats, "
            "by pool and the borrower's organisation",
            ["pool", "org"],
            registry=r,
        )
        self.alerts = Counter(
            "fairgate_budget_alerts",
            "Soft-limit alerts by channel (webhook, smtp; any) and result (sent, failed, "
            "queue_full, store_unavailable, stopped)",
            ["channel", "result"],
            registry=r,
        )
        self.connections_refused = Counter(
            "fairgate_connections_refused",
            "Connections answered 503 and closed by a listener's connection cap, by listener "
            "(client, admin) and reason (max_connections, max_connections_per_network)",
            ["listener", "reason"],
            registry=r,
        )
        self.connections_open = Gauge(
            "fairgate_connections_open",
            "Connections a listener holds now (this process), by listener",
            ["listener"],
            registry=r,
        )
        self.admission = AdmissionMetrics(r)
        if replicas is not None:
            r.register(_ReplicaCollector(replicas))
        self._children: dict[tuple[Any, ...], Any] = {}
        self._settled: dict[tuple[str, str, str], SettledMetrics] = {}

    def watch_accounting(self, read: Callable[[], tuple[int, int]]) -> None:
        """Report the recorder's queue length and duplicates, read at scrape time."""
        self.registry.register(_AccountingCollector(read))

    def child(self, family: Any, *labels: str) -> Any:
        """The cached label child of ``family`` for ``labels``."""
        key = (id(family), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = family.labels(*labels)
        return found

    def settled(self, model: str, route: str, status: str) -> SettledMetrics:
        """The children a settled request of this (model, route, status) writes, made once."""
        found = self._settled.get((model, route, status))
        if found is None:
            found = self._settled[(model, route, status)] = SettledMetrics(
                self, model, route, status
            )
        return found
