"""Replicas and the I/O that keeps their state: pool, health checks, breaker, metrics.

    registry = ReplicaRegistry([Replica("gpu01", "llama-3.3-70b", "http://10.0.0.11:8000",
                                        1, key, adapter_for("vllm"), Breaker())])
    replica = registry.pick("llama-3.3-70b", session=key_id, prefix=hashes)   # None → 503
    with registry.lease(replica):                        # in-flight counted by the gateway
        async with sessions.request(replica, "POST", route.path, headers=h, data=b) as resp:
            ...                                          # then breaker.success()/failure()

``pick`` runs the model's routing strategy (``fairgate.routing``) over fresh
snapshots of its replicas. Three independent signals per replica, each with its
own failure policy:
health checks decide ``healthy``; real request outcomes feed the breaker;
scraped metrics give the load and, when they fail, only make it unknown.
"""

from __future__ import annotations

from fairgate.core.breaker import Breaker, BreakerState
from fairgate.upstream.errors import (
    UpstreamClosedBeforeAnswer,
    UpstreamConnectError,
    UpstreamConnectTimeout,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTooLarge,
)
from fairgate.upstream.health import HealthChecker
from fairgate.upstream.periodic import PeriodicTask
from fairgate.upstream.pool import UpstreamPool
from fairgate.upstream.registry import ReplicaRegistry
from fairgate.upstream.replica import Replica
from fairgate.upstream.response import UpstreamResponse
from fairgate.upstream.scraper import MetricsScraper
from fairgate.upstream.sessions import UpstreamSessions, read_bounded

__all__ = [
    "Breaker",
    "BreakerState",
    "HealthChecker",
    "MetricsScraper",
    "PeriodicTask",
    "Replica",
    "ReplicaRegistry",
    "UpstreamClosedBeforeAnswer",
    "UpstreamConnectError",
    "UpstreamConnectTimeout",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamProtocolError",
    "UpstreamResponse",
    "UpstreamSessions",
    "UpstreamTooLarge",
    "read_bounded",
]
