"""``queue-depth``: prefers replicas with fewer requests waiting in the engine's queue.

score = 1 / (1 + waiting / scale)        waiting 0 → 1.0, waiting = scale → 0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures
from fairgate.routing.state import RoutingState

__all__ = ["QueueDepthScorer"]

UNKNOWN = 0.5
"""The score of a replica whose queue depth is unknown (stale or failed scrape): neutral."""


@dataclass(frozen=True, slots=True)
class QueueDepthScorer:
    """Scores the scraped ``waiting`` count; ``scale`` (> 0) is the depth that halves the score.

    The score is absolute, not relative to the other replicas, so one more
    request waiting moves it the same way whoever else is in the pool.
    """

    name: ClassVar[str] = "queue-depth"
    scale: float = 4.0

    def __post_init__(self) -> None:
        if not (self.scale > 0 and math.isfinite(self.scale)):
            raise ValueError(f"scale must be a positive number, got {self.scale!r}")

    def score(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures, state: RoutingState
    ) -> list[float]:
        return [
            UNKNOWN
            if (waiting := r.waiting) is None
            else 1.0 / (1.0 + (waiting if waiting > 0.0 else 0.0) / self.scale)  # max(0.0, w)
            for r in replicas
        ]
