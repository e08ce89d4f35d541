"""What the algorithms see of a replica: a frozen snapshot, never the live object.

Routing and admission receive ``Sequence[ReplicaSnapshot]`` built by the replica
layer at decision time, so they stay pure and can be tested without sockets.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ReplicaSnapshot"]


@dataclass(frozen=True, slots=True)
class ReplicaSnapshot:
    """One replica of one model at one instant.

    ``running``, ``waiting`` and ``kv_usage`` come from the engine's scraped
    metrics and are ``None`` when unknown or stale; ``in_flight`` is counted by
    the gateway itself and is always known. ``kv_usage`` is a fraction in [0, 1].
    ``breaker_open`` is true while the circuit breaker refuses traffic.

    Fair share across replicas: ``within_share`` and ``borrowing`` split this
    gateway's ``in_flight`` by how its requests were admitted (within their
    organisation's reservation, or borrowing); ``seats`` is the replica's part of
    its pool's capacity C (requests it runs without preemption), ``None`` for a
    replica outside any fair-share pool.
    """

    name: str
    model: str
    weight: int = 1
    healthy: bool = True
    breaker_open: bool = False
    in_flight: int = 0
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    within_share: int = 0
    borrowing: int = 0
    seats: float | None = None
