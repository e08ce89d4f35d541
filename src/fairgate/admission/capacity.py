"""Batch capacity per replica, learned from the engines' own ``running`` counts.

No engine metric says how many requests a replica runs at once (vLLM's
``--max-num-seqs`` and its KV cache decide it), so it is learned:

- it starts at ``initial`` (the operator's estimate) and never goes below it;
- it rises to the high-water mark of observed ``running``: an engine that ran
  n requests at once can run n;
- it probes upwards: when a replica runs at least its learned capacity and
  reports nothing waiting, it may have room the gateway never offered it (the
  gateway holds bands back at this very capacity, so the high-water mark alone
  could never rise past a low start). The capacity then becomes running plus
  one step (``probe_fraction`` of it rounded up, at least one request, so whole
  counts stay whole). One step per new observation: the next needs
  ``running`` to reach the raised value. Once the engine queues (``waiting`` >
  0), the probing stops, at most one step high;
- it is forgotten (back to ``initial``) when the replica's metrics have been
  unknown for ``reset_after`` seconds: a restarting engine is unreachable while
  it loads, and may come back with another batch size. Replicas absent from
  the snapshots that long are dropped, so memory follows the fleet.

It never decreases otherwise: a transient ``waiting`` count between two engine
steps is no evidence of a smaller batch. An ``initial`` above the real batch
size is therefore never corrected and lets the engines queue before the
gateway holds anything back; an ``initial`` too low is corrected by the probe,
but only while traffic fills the learned capacity (a band whose ceiling is 1.0
or more, under load): bands held below 1.0 alone never reach it. Start close,
and low rather than high. The KV part of the saturation covers engines whose
batch is bound by KV memory.

Worked example: initial 16. A scrape shows running 20, waiting 3 → 20 (the
high-water mark). Later running 20, waiting 0 → 20 + ⌈20/16⌉ = 22; running
21, waiting 0 → still 22 (21 < 22: no new evidence).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from fairgate.admission.saturation import replica_key
from fairgate.core.replica import ReplicaSnapshot

__all__ = [
    "DEFAULT_PROBE_FRACTION",
    "DEFAULT_RESET_AFTER",
    "CapacityTracker",
    "starting_capacities",
]

DEFAULT_RESET_AFTER = 60.0
"""Seconds without metrics after which a replica's learned capacity is forgotten."""

DEFAULT_PROBE_FRACTION = 1 / 16
"""How far above a fully used, non-queueing capacity the probe reaches (at least 1)."""


@dataclass(slots=True)
class _Learned:
    capacity: float
    known_at: float


class CapacityTracker:
    """Learned batch capacity per replica (``replica_key``), in requests, never below its start.

    ``initial`` > 0 requests is the start of every replica, except those named
    in ``initial_by_replica`` (``replica_key`` → start > 0, e.g. a pool's
    capacity split over its replicas by weight); ``reset_after`` > 0 seconds;
    ``probe_fraction`` in [0, 1] (0 disables the probe: the plain high-water mark).
    ``observe`` takes ``now`` in seconds on any monotonic clock; it is O(replicas).
    Raises ``ValueError`` on parameters out of range.
    """

    def __init__(
        self,
        initial: float,
        *,
        initial_by_replica: Mapping[str, float] | None = None,
        reset_after: float = DEFAULT_RESET_AFTER,
        probe_fraction: float = DEFAULT_PROBE_FRACTION,
    ) -> None:
        starts = dict(initial_by_replica or {})
        for key, value in [("initial", initial), *starts.items()]:
            if not value > 0:
                raise ValueError(f"initial capacity of {key} must be > 0, got {value!r}")
        if not reset_after > 0:
            raise ValueError(f"reset_after must be > 0, got {reset_after!r}")
        if not 0.0 <= probe_fraction <= 1.0:
            raise ValueError(f"probe_fraction must be in [0, 1], got {probe_fraction!r}")
        self.initial = float(initial)
        self._starts = {key: float(value) for key, value in starts.items()}
        self.reset_after = float(reset_after)
        self.probe_fraction = float(probe_fraction)
        self._learned: dict[str, _Learned] = {}
        self._view: dict[str, float] = {}

    def observe(self, snapshots: Sequence[ReplicaSnapshot], now: float) -> None:
        """Learn from one set of snapshots taken at ``now``."""
        # Read on the hot path (each saturation reading): the key (``replica_key``) and
        # the learning step are written out rather than called.
        learned, view, probe = self._learned, self._view, self.probe_fraction
        for replica in snapshots:
            key = f"{replica.model}/{replica.name}"
            entry = learned.get(key)
            if entry is None:
                entry = learned[key] = _Learned(self.start(key), now)
            running = replica.running
            if running is None:
                if now - entry.known_at >= self.reset_after:
                    entry.capacity = self.start(key)
            else:
                entry.known_at = now
                capacity = entry.capacity
                if running > capacity:
                    capacity = running
                waiting = replica.waiting
                if probe and waiting is not None and waiting <= 0 and running >= capacity:
                    capacity = running + max(1, math.ceil(running * probe))
                entry.capacity = capacity
            view[key] = entry.capacity
        if len(learned) > len(snapshots):
            self._forget_absent({replica_key(r) for r in snapshots}, now)

    def _forget_absent(self, present: set[str], now: float) -> None:
        gone = [
            key
            for key, entry in self._learned.items()
            if key not in present and now - entry.known_at >= self.reset_after
        ]
        for key in gone:
            del self._learned[key]
            self._view.pop(key, None)

    def set_starts(self, starts: Mapping[str, float]) -> None:
        """Replace ``initial_by_replica`` (a pool's replicas change at run time: the fleet
        places and removes them). A new start applies to a replica from its first
        observation, and when its capacity is forgotten; one learned already keeps its
        value. Raises ``ValueError`` on a start that is not > 0."""
        for key, value in starts.items():
            if not value > 0:
                raise ValueError(f"initial capacity of {key} must be > 0, got {value!r}")
        self._starts = {key: float(value) for key, value in starts.items()}

    def start(self, key: str) -> float:
        """Where the replica ``key`` starts, and returns to when forgotten."""
        return self._starts.get(key, self.initial)

    def capacity(self, key: str) -> float:
        """The learned capacity of the replica ``key``; its start if never seen."""
        entry = self._learned.get(key)
        return self.start(key) if entry is None else entry.capacity

    def capacities(self) -> Mapping[str, float]:
        """A live read-only view: ``replica_key`` → learned capacity, for ``saturation``."""
        return MappingProxyType(self._view)


def starting_capacities(
    replicas: Sequence[tuple[str, float]],
    *,
    pool_start: float | None,
    fixed: float | None,
    total_weight: float | None = None,
) -> dict[str, float]:
    """Each replica's batch capacity before anything is learned, by replica key, from
    ``(key, weight)`` pairs: ``fixed`` when the operator set one
    (``admission.replica_capacity``); else the replica's part of its pool's starting
    capacity ``pool_start`` by weight (at least 1) among ``total_weight`` (the weights of
    every replica the pool is meant to have; default: those given); else 1."""
    total = (sum(weight for _, weight in replicas) if total_weight is None else total_weight) or 1
    return {
        key: fixed
        if fixed is not None
        else 1.0
        if pool_start is None
        else max(1.0, pool_start * weight / total)
        for key, weight in replicas
    }
