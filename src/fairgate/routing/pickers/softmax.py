"""``softmax``: a random replica, drawn with probability ∝ exp(total / temperature).

A low temperature approaches ``max-score``; a high one approaches a uniform
draw. Useful when several gateway replicas decide from the same scraped
metrics: they spread their choices instead of all rushing the same replica.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.plugin import Pick

__all__ = ["SoftmaxPicker"]


@dataclass(frozen=True, slots=True)
class SoftmaxPicker:
    """``temperature`` (> 0) in units of total score (totals lie in [0, 1])."""

    name: ClassVar[str] = "softmax"
    temperature: float = 0.1

    def __post_init__(self) -> None:
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a positive number, got {self.temperature!r}")

    def pick(
        self, scored: Sequence[tuple[ReplicaSnapshot, float]], rng: random.Random, cursor: int
    ) -> Pick:
        if not scored:
            return Pick(None, cursor)
        best = max(total for _, total in scored)
        weights = [math.exp((total - best) / self.temperature) for _, total in scored]
        draw = rng.random() * sum(weights)
        for (replica, _), weight in zip(scored, weights, strict=True):
            draw -= weight
            if draw < 0:
                return Pick(replica, cursor)
        return Pick(scored[-1][0], cursor)  # float rounding left a sliver at the end
