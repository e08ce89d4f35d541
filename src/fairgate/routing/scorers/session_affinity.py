"""``session-affinity``: keeps a session on one replica, unless that replica is overloaded.

Bounded-load consistent hashing over the candidates' gateway in-flight counts
(see :mod:`fairgate.routing.ring`): the session's home is the first replica on
its ring walk carrying fewer than ``ceil((1 + ε)(L + 1) / n)`` requests.

    score = 1.0 for the home replica, 0.0 for the others (and for all without a session key)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures
from fairgate.routing.ring import HashRing, point
from fairgate.routing.state import RoutingState

__all__ = ["SessionAffinityScorer"]

_RINGS_KEPT = 32
_POINTS_KEPT = 4096


@dataclass(frozen=True, slots=True)
class SessionAffinityScorer:
    """``epsilon`` (> 0) is the overload allowed above the average; ``vnodes`` the ring points
    per replica.

    A ring depends only on the candidates' names; up to 32 candidate sets keep
    theirs in a small cache (the oldest set goes first), and up to 4,096 session
    keys their hash (the oldest key goes first), so a decision costs a binary
    search and a walk of at most n replicas, plus one hash for a key not seen
    lately. The caches never change a result.
    """

    name: ClassVar[str] = "session-affinity"
    epsilon: float = 0.25
    vnodes: int = 64
    _rings: dict[frozenset[str], HashRing] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _points: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError(f"epsilon must be a positive number, got {self.epsilon!r}")
        if self.vnodes <= 0:
            raise ValueError(f"vnodes must be positive, got {self.vnodes!r}")

    def score(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures, state: RoutingState
    ) -> list[float]:
        key = request.session_key
        if key is None or not replicas:
            return [0.0] * len(replicas)
        loads = {r.name: r.in_flight if r.in_flight > 0 else 0 for r in replicas}
        names = frozenset(loads)
        ring = self._rings.get(names)
        if ring is None:
            ring = self._ring(names)
        at = self._points.get(key)
        if at is None:
            at = self._point(key)
        home = ring.home(key, loads, self.epsilon, at=at)
        return [1.0 if r.name == home else 0.0 for r in replicas]

    def _point(self, key: str) -> int:
        if len(self._points) >= _POINTS_KEPT:
            del self._points[next(iter(self._points))]
        at = self._points[key] = point(key)
        return at

    def _ring(self, names: frozenset[str]) -> HashRing:
        ring = HashRing(names, self.vnodes)
        if len(self._rings) >= _RINGS_KEPT:
            del self._rings[next(iter(self._rings))]
        self._rings[names] = ring
        return ring
