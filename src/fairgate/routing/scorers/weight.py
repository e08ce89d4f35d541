"""``weight``: a static preference for replicas with a larger configured weight.

score = weight / max(weight over the candidates)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures
from fairgate.routing.state import RoutingState

__all__ = ["WeightScorer"]


@dataclass(frozen=True, slots=True)
class WeightScorer:
    """Scores the configured weight relative to the heaviest candidate. No parameters.

    A weight of 0 or less scores 0. On its own it always prefers the heaviest
    replica; to spread load in proportion to weight, use ``in-flight``.
    """

    name: ClassVar[str] = "weight"

    def score(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures, state: RoutingState
    ) -> list[float]:
        heaviest = max((r.weight for r in replicas), default=0)
        if heaviest <= 0:
            return [0.0] * len(replicas)
        return [max(0, r.weight) / heaviest for r in replicas]
