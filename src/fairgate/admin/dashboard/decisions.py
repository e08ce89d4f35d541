"""The last routing decisions, kept in a bounded ring for the dashboard.

    ring = DecisionRing(capacity=20, clock=clock)
    registry = ReplicaRegistry(..., on_decision=ring.observe)   # beside the metrics
    ring.latest(models={"llama"})      # newest first: [(wall time, Decision), ...]

``observe`` is on the request path: it appends one tuple to a ``deque`` with a
``maxlen`` (O(1), no allocation beyond the tuple). A decision's mappings
(drops, scores, totals) are built only when the dashboard reads them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection

from fairgate.core.clock import Clock
from fairgate.routing import Decision

__all__ = ["DecisionRing"]


class DecisionRing:
    """The newest ``capacity`` (>= 1) routing decisions of every model with their wall time.

    Raises ``ValueError`` for a capacity below 1. Meant for one event loop.
    """

    def __init__(self, capacity: int, clock: Clock) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity!r}")
        self._clock = clock
        self._ring: deque[tuple[float, Decision]] = deque(maxlen=capacity)

    def observe(self, decision: Decision) -> None:
        """Keep ``decision`` (what ``ReplicaRegistry(on_decision=…)`` calls)."""
        self._ring.append((self._clock.wall(), decision))

    def latest(self, models: Collection[str] | None = None) -> list[tuple[float, Decision]]:
        """The kept decisions, newest first, of ``models`` only (None: every model)."""
        return [(at, d) for at, d in reversed(self._ring) if models is None or d.model in models]
