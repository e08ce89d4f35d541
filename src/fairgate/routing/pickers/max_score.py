"""``max-score``: the replica with the highest total; ties drawn at random."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.plugin import Pick

__all__ = ["MaxScorePicker"]

_TIE = 1e-12
_total = itemgetter(1)


@dataclass(frozen=True, slots=True)
class MaxScorePicker:
    """Picks the best total. Equal totals (within 1e-12) are drawn uniformly from ``rng``,
    so identical replicas share the load instead of the first one taking it all.
    No parameters."""

    name: ClassVar[str] = "max-score"

    def pick(
        self, scored: Sequence[tuple[ReplicaSnapshot, float]], rng: random.Random, cursor: int
    ) -> Pick:
        if not scored:
            return Pick(None, cursor)
        leader, best = max(scored, key=_total)
        tied = [replica for replica, total in scored if total >= best - _TIE]
        return Pick(leader if len(tied) == 1 else rng.choice(tied), cursor)
