"""The three plugin roles of routing: Filter, Scorer, Picker.

A routing decision runs every filter in order, then every scorer over the
replicas left, then one picker over (replica, total score) pairs:

    total(r) = Σ weightᵢ · scoreᵢ(r) / Σ weightᵢ        ∈ [0, 1]

Plugins are stateless: whatever must persist between decisions (round-robin
cursor, prefix index) comes in through :class:`RoutingState`; randomness comes
in as a ``random.Random``. A plugin never does I/O and never raises on a
replica whose metrics are unknown.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures
from fairgate.routing.state import RoutingState

__all__ = ["Filter", "Pick", "Picker", "Scorer"]


class Filter(Protocol):
    """Keeps the replicas that may serve the request.

    Returns the kept subset in the input order (never a replica that was not
    given); an empty input gives an empty output. ``name`` is the stable
    kebab-case name the configuration uses.
    """

    @property
    def name(self) -> str: ...

    def filter(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures
    ) -> list[ReplicaSnapshot]: ...


class Scorer(Protocol):
    """Rates each replica for the request: one score per replica, aligned with the input.

    Scores lie in [0, 1], higher is better; unknown metrics get a neutral score
    rather than an error. Deterministic for the same input and state, and
    O(len(replicas)) apart from per-request work bounded by the request (its
    prefix blocks), never by the number of keys or sessions.
    """

    @property
    def name(self) -> str: ...

    def score(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures, state: RoutingState
    ) -> list[float]: ...


class Pick(NamedTuple):
    """The chosen replica (``None`` only for an empty input) and the next round-robin cursor."""

    replica: ReplicaSnapshot | None
    cursor: int


class Picker(Protocol):
    """Chooses one of (replica, total score) pairs; totals lie in [0, 1].

    Randomised pickers draw only from ``rng``, so a seeded ``rng`` makes the
    choice reproducible; ``cursor`` is handed in and the next value handed back
    (pickers that do not use it return it unchanged).
    """

    @property
    def name(self) -> str: ...

    def pick(
        self, scored: Sequence[tuple[ReplicaSnapshot, float]], rng: random.Random, cursor: int
    ) -> Pick: ...
