"""``in-flight``: prefers replicas with fewer gateway requests in flight per unit of weight.

    score = 1 / (1 + in_flight / (scale · weight))

In-flight is counted by the gateway itself, so it is never stale; dividing by
the replica's weight makes a weight-2 replica with 8 requests score like a
weight-1 replica with 4, which spreads load in proportion to weight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures
from fairgate.routing.state import RoutingState

__all__ = ["InFlightScorer"]


@dataclass(frozen=True, slots=True)
class InFlightScorer:
    """``scale`` (> 0) is the in-flight count per unit of weight that halves the score.

    A replica with a weight of 0 or less scores 0.
    """

    name: ClassVar[str] = "in-flight"
    scale: float = 8.0

    def __post_init__(self) -> None:
        if not (self.scale > 0 and math.isfinite(self.scale)):
            raise ValueError(f"scale must be a positive number, got {self.scale!r}")

    def score(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures, state: RoutingState
    ) -> list[float]:
        return [
            1.0 / (1.0 + (n if (n := r.in_flight) > 0 else 0) / (self.scale * r.weight))
            if r.weight > 0
            else 0.0
            for r in replicas
        ]
