"""``power-of-two``: two replicas drawn at random, the better of the two kept.

Power-of-two-choices (Mitzenmacher): nearly as balanced as always taking the
best, without sending a burst of simultaneous requests all to the same replica
while the scores catch up.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.plugin import Pick

__all__ = ["PowerOfTwoPicker"]


@dataclass(frozen=True, slots=True)
class PowerOfTwoPicker:
    """Draws two distinct replicas uniformly from ``rng`` and keeps the higher total
    (the first drawn on a tie). A single replica is picked as is. No parameters."""

    name: ClassVar[str] = "power-of-two"

    def pick(
        self, scored: Sequence[tuple[ReplicaSnapshot, float]], rng: random.Random, cursor: int
    ) -> Pick:
        if not scored:
            return Pick(None, cursor)
        if len(scored) == 1:
            return Pick(scored[0][0], cursor)
        # Two distinct indices from two uniform draws (``rng.sample`` costs ten times more).
        count = len(scored)
        first = min(int(rng.random() * count), count - 1)
        second = min(int(rng.random() * (count - 1)), count - 2)
        second += second >= first
        winner = second if scored[second][1] > scored[first][1] else first
        return Pick(scored[winner][0], cursor)
