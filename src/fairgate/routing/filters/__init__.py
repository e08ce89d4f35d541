"""Built-in filters: each keeps the replicas that may serve a request."""

from __future__ import annotations

from fairgate.routing.filters.breaker_closed import BreakerClosedFilter
from fairgate.routing.filters.fair_share import FairShareFilter
from fairgate.routing.filters.healthy import HealthyFilter
from fairgate.routing.filters.kv_ceiling import KvCeilingFilter
from fairgate.routing.filters.serves_model import ServesModelFilter

__all__ = [
    "BreakerClosedFilter",
    "FairShareFilter",
    "HealthyFilter",
    "KvCeilingFilter",
    "ServesModelFilter",
]
