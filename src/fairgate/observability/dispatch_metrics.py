"""Borrowers held by the gateway while their pool is full (``fairgate.proxy.dispatch``).

    fairgate_fairshare_held{pool}                       borrowers held now
    fairgate_fairshare_held_wait_seconds{pool}          how long each one dispatched was held
    fairgate_fairshare_held_rejections{pool, reason}    queue_full (503), queue_timeout (504),
                                                        cancelled (its client went away)

``DispatchMetrics`` is the dispatcher's observer: every call is O(1), never raises.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["DispatchMetrics"]


class DispatchMetrics:
    """The families above on ``registry``; the methods match ``HoldObserver``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._held = Gauge(
            "fairgate_fairshare_held",
            "Borrowing requests held by this gateway while their pool is full, by pool",
            ["pool"],
            registry=registry,
        )
        self._wait = Histogram(
            "fairgate_fairshare_held_wait_seconds",
            "Time a held borrowing request waited in the gateway before it was dispatched",
            ["pool"],
            buckets=(0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self._rejected = Counter(
            "fairgate_fairshare_held_rejections",
            "Held borrowing requests that were not dispatched, by pool and reason "
            "(queue_full, queue_timeout, cancelled)",
            ["pool", "reason"],
            registry=registry,
        )

    def held(self, pool: str, depth: int) -> None:
        self._held.labels(pool).set(depth)

    def dispatched(self, pool: str, waited: float) -> None:
        self._wait.labels(pool).observe(waited)

    def rejected(self, pool: str, reason: str) -> None:
        self._rejected.labels(pool, reason).inc()
