"""``healthy``: drops replicas whose health check fails."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures

__all__ = ["HealthyFilter"]

_healthy = attrgetter("healthy")


@dataclass(frozen=True, slots=True)
class HealthyFilter:
    """Keeps replicas with ``healthy`` set. No parameters."""

    name: ClassVar[str] = "healthy"

    def filter(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures
    ) -> list[ReplicaSnapshot]:
        return list(filter(_healthy, replicas))  # in C: once a request
