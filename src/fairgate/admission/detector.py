"""The saturation detector of one pool: live snapshots in, one saturation number out.

It binds the pure pieces to a pool: each call takes the pool's replica
snapshots as they are now, lets the ``CapacityTracker`` learn from them, and
returns ``saturation(...)`` with the controller's pending count. An
``AdmissionController`` takes it as its ``saturation_fn``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fairgate.admission.capacity import CapacityTracker
from fairgate.admission.saturation import DEFAULT_KV_LIMIT, saturation
from fairgate.core.clock import Clock
from fairgate.core.replica import ReplicaSnapshot

__all__ = ["SaturationDetector"]


class SaturationDetector:
    """``detector(pending) -> saturation`` of the pool whose replicas ``snapshots()`` returns.

    ``snapshots`` must be cheap and synchronous (the replica layer's frozen
    snapshots, stale engine metrics already hidden as ``None``); it is called
    once per saturation reading, O(replicas). ``kv_limit`` in (0, 1] is the KV
    occupancy that counts as full. Raises ``ValueError`` for a ``kv_limit`` out
    of range.
    """

    def __init__(
        self,
        snapshots: Callable[[], Sequence[ReplicaSnapshot]],
        tracker: CapacityTracker,
        clock: Clock,
        *,
        kv_limit: float = DEFAULT_KV_LIMIT,
    ) -> None:
        if not 0.0 < kv_limit <= 1.0:
            raise ValueError(f"kv_limit must be in (0, 1], got {kv_limit!r}")
        self._snapshots = snapshots
        self.tracker = tracker
        self._capacities = tracker.capacities()  # a live view: taken once
        self._clock = clock
        self.kv_limit = kv_limit

    def __call__(self, pending: int) -> float:
        replicas = self._snapshots()
        self.tracker.observe(replicas, self._clock.monotonic())
        return saturation(
            replicas,
            self._capacities,
            pending,
            kv_limit=self.kv_limit,
            default_capacity=self.tracker.initial,
        )
