"""``breaker-closed``: drops replicas whose circuit breaker refuses traffic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import filterfalse
from operator import attrgetter
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures

__all__ = ["BreakerClosedFilter"]

_open = attrgetter("breaker_open")


@dataclass(frozen=True, slots=True)
class BreakerClosedFilter:
    """Keeps replicas whose breaker is not open (a half-open breaker's probe is let through
    by the breaker itself, which then reports it closed). No parameters."""

    name: ClassVar[str] = "breaker-closed"

    def filter(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures
    ) -> list[ReplicaSnapshot]:
        return list(filterfalse(_open, replicas))  # in C: once a request
