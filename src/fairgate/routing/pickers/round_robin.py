"""``round-robin``: the replicas in turn, whatever their scores."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.plugin import Pick

__all__ = ["RoundRobinPicker"]


@dataclass(frozen=True, slots=True)
class RoundRobinPicker:
    """Takes the replica at ``cursor`` in name order and hands back ``cursor + 1``.

    The cursor is the caller's (``RoutingState.cursor``), so the picker holds no
    state; ordering by name keeps the turn stable however the caller lists the
    replicas. No parameters.
    """

    name: ClassVar[str] = "round-robin"

    def pick(
        self, scored: Sequence[tuple[ReplicaSnapshot, float]], rng: random.Random, cursor: int
    ) -> Pick:
        if not scored:
            return Pick(None, cursor)
        ordered = sorted((replica for replica, _ in scored), key=lambda r: r.name)
        return Pick(ordered[cursor % len(ordered)], cursor + 1)
