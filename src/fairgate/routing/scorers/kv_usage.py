"""``kv-usage``: prefers replicas with more free KV cache.

score = 1 − kv_usage        (clamped to [0, 1])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures
from fairgate.routing.state import RoutingState

__all__ = ["KvUsageScorer"]

UNKNOWN = 0.5
"""The score of a replica whose KV usage is unknown: neutral."""


@dataclass(frozen=True, slots=True)
class KvUsageScorer:
    """Scores the scraped KV-cache occupancy (a fraction). No parameters."""

    name: ClassVar[str] = "kv-usage"

    def score(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures, state: RoutingState
    ) -> list[float]:
        # 1 − kv clamped to [0, 1] (NaN → 0.0), as min(1.0, max(0.0, 1 − kv)) without the calls
        return [
            UNKNOWN
            if (kv := r.kv_usage) is None
            else (free if 0.0 < (free := 1.0 - kv) < 1.0 else 1.0 if free >= 1.0 else 0.0)
            for r in replicas
        ]
