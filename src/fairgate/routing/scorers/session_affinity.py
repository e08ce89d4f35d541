"""``session-affinity``: keeps a session on one replica, unless that replica is overloaded.

Bounded-load consistent hashing over the candidates' gateway in-flight counts
(see :mod:`fairgate.routing.ring`): the session's home is the first replica on
its ring walk carrying fewer than ``ceil((1 + ε)(L + 1) / n)`` requests.

    score = 1.0 for the home replica, 0.0 for the others (and for all without a session key)
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures
from fairgate.routing.ring import HashRing
from fairgate.routing.state import RoutingState

__all__ = ["SessionAffinityScorer"]

_RINGS_KEPT = 32


@dataclass(frozen=True, slots=True)
class SessionAffinityScorer:
    """``epsilon`` (> 0) is the overload allowed above the average; ``vnodes`` the ring points
    per replica.

    A ring depends only on the candidates' names; the last few are kept in a
    small cache so a decision costs one hash, a binary search and a walk of at
    most n replicas. The cache never changes a result.
    """

    name: ClassVar[str] = "session-affinity"
    epsilon: float = 0.25
    vnodes: int = 64
    _rings: OrderedDict[frozenset[str], HashRing] = field(
        default_factory=OrderedDict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError(f"epsilon must be a positive number, got {self.epsilon!r}")
        if self.vnodes <= 0:
            raise ValueError(f"vnodes must be positive, got {self.vnodes!r}")

    def score(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures, state: RoutingState
    ) -> list[float]:
        if request.session_key is None or not replicas:
            return [0.0] * len(replicas)
        ring = self._ring(frozenset(r.name for r in replicas))
        loads = {r.name: max(0, r.in_flight) for r in replicas}
        home = ring.home(request.session_key, loads, self.epsilon)
        return [1.0 if r.name == home else 0.0 for r in replicas]

    def _ring(self, names: frozenset[str]) -> HashRing:
        ring = self._rings.get(names)
        if ring is None:
            ring = HashRing(names, self.vnodes)
            self._rings[names] = ring
            if len(self._rings) > _RINGS_KEPT:
                self._rings.popitem(last=False)
        else:
            self._rings.move_to_end(names)
        return ring
