"""Each pool's replicas as routing has them now, and what follows from them.

Fair share's seats, admission's saturation and the dispatcher's room are read over
a pool's replicas. Those of ``deploy:`` models join routing when their engine is
ready and leave it when they drain, are lost or stop (``ReplicaRegistry.add`` and
``remove``); ``PoolMembers`` is the one subscriber to those changes, and every
reader of a pool's replicas reads them here:

    members = PoolMembers(registry, {"llama": "b300", "solo": "solo"},
                          {"b300": Seating(16, wanted_weight=2, follows=True)}, policy)
    members.replicas("b300")            # a live view: the replicas routed now
    members.snapshots("b300")()         # their snapshots now
    members.follow("b300", tracker)     # a CapacityTracker's starts follow them
    members.on_change(listener)         # listener(group) after each change

A group is a model's pool, or the model itself when it has none (admission's
unit). In a declared pool each replica's seats are its part of the configured
capacity C by weight among every replica the pool is meant to have (the weights of
its models' static upstreams, plus one per wanted replica of its ``deploy:``
models): ``seats = C × weight / wanted weight``. A pool of fixed capacity with
``deploy:`` models (``follows``) has as C the seats of the replicas routed now,
rounded down: a replica that joins brings its seats, one that leaves takes them
away, and ``FairShare.set_capacity`` apportions the reservations again. A pool of
static upstreams only keeps its C and its seats as configured, whatever their
health. In a pool of ``capacity: auto`` C and the seats are its learner's
(``PoolCapacity``, which reads the live view); a replica that joins has its part
of the floor until the learner's next step.

A request in flight on a replica that leaves keeps its counts on the replica
object (``in_flight``, ``within_share``, ``borrowing``), its fair-share slot in the
state back end and its admission lease or dispatch grant in its pool: each is
given back as usual when the request ends, so every release balances.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

from fairgate.admission import CapacityTracker
from fairgate.admission.capacity import starting_capacities
from fairgate.core.replica import ReplicaSnapshot
from fairgate.fairshare import FairShare
from fairgate.upstream.pool_capacity import replica_name
from fairgate.upstream.registry import ReplicaRegistry
from fairgate.upstream.replica import Replica

__all__ = ["PoolMembers", "Seating"]

log = logging.getLogger("fairgate.fairshare")

_TOLERANCE = 1e-9  # seats summing to within this of a whole number count as that number


@dataclass(frozen=True, slots=True)
class Seating:
    """How a declared pool seats its replicas: ``capacity`` is the configured C (the floor
    of ``capacity: auto``), ``wanted_weight`` the weights of every replica the pool is
    meant to have; ``follows``: C is the routed replicas' seats (fixed capacity with
    ``deploy:`` models); ``learned``: C and the seats are ``PoolCapacity``'s."""

    capacity: int
    wanted_weight: float
    follows: bool = False
    learned: bool = False

    def seats(self, replica: Replica) -> float:
        """The replica's part of C by weight."""
        if self.wanted_weight <= 0:
            return 0.0
        return self.capacity * replica.weight / self.wanted_weight


class _Live(Sequence[Replica]):
    """A group's replicas, read anew at each use (``PoolMembers.replicas``)."""

    __slots__ = ("_group", "_members")

    def __init__(self, members: PoolMembers, group: str) -> None:
        self._members = members
        self._group = group

    @overload
    def __getitem__(self, index: int) -> Replica: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Replica]: ...

    def __getitem__(self, index: int | slice) -> Replica | Sequence[Replica]:
        return self._members.now(self._group)[index]

    def __len__(self) -> int:
        return len(self._members.now(self._group))

    def __iter__(self) -> Iterator[Replica]:
        return iter(self._members.now(self._group))

    def __repr__(self) -> str:
        return f"<replicas of {self._group}: {list(self)!r}>"


class PoolMembers:
    """The replicas of each group routed now (see the module text).

    ``groups`` maps every model to its group (its pool, or its own name); ``pools``
    holds the seating of each declared pool; ``policy`` is fair share's (its pools'
    C follow the replicas where ``Seating.follows``). Subscribes to ``registry``.
    """

    def __init__(
        self,
        registry: ReplicaRegistry,
        groups: Mapping[str, str],
        pools: Mapping[str, Seating],
        policy: FairShare | None = None,
    ) -> None:
        self._registry = registry
        self._group_of = dict(groups)
        self._models: dict[str, list[str]] = {}
        for model, group in groups.items():
            self._models.setdefault(group, []).append(model)
        self._pools = dict(pools)
        self._policy = policy
        self._now: dict[str, tuple[Replica, ...]] = {}
        self._followers: dict[str, list[tuple[CapacityTracker, float | None]]] = {}
        self._listeners: list[Callable[[str], None]] = []
        for group in self._models:
            self._refresh(group, "start-up")
        registry.subscribe(self._changed)

    def groups(self) -> tuple[str, ...]:
        return tuple(self._models)

    def following(self) -> frozenset[str]:
        """The pools whose C is the seats of the replicas routed now (``Seating.follows``)."""
        return frozenset(pool for pool, seating in self._pools.items() if seating.follows)

    def now(self, group: str) -> tuple[Replica, ...]:
        """The replicas of ``group`` routed now (empty for an unknown group)."""
        return self._now.get(group, ())

    def replicas(self, group: str) -> Sequence[Replica]:
        """A live view of ``group``'s replicas: each use reads the ones routed then."""
        return _Live(self, group)

    def snapshots(self, group: str) -> Callable[[], list[ReplicaSnapshot]]:
        """What admission and the dispatcher read: the snapshots of the replicas now."""
        now, snapshot = self._now, Replica.snapshot  # read at each saturation reading
        return lambda: list(map(snapshot, now.get(group, ())))

    def follow(self, group: str, tracker: CapacityTracker, fixed: float | None = None) -> None:
        """Keep ``tracker``'s starts those of ``group``'s replicas now: ``fixed`` when given
        (``admission.replica_capacity``), else each replica's part of the pool's C (at
        least 1; 1 outside a declared pool)."""
        self._followers.setdefault(group, []).append((tracker, fixed))
        self._starts(group, tracker, fixed)

    def on_change(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(group)`` after each change of ``group``'s replicas."""
        self._listeners.append(listener)

    def _changed(self, model: str) -> None:
        group = self._group_of.get(model)
        if group is None:
            return  # a model the configuration does not name: nothing reads it
        self._refresh(group, f"the replicas of {model} changed")
        for listener in self._listeners:
            listener(group)

    def _refresh(self, group: str, why: str) -> None:
        replicas = tuple(r for m in self._models[group] for r in self._registry.replicas(m))
        self._now[group] = replicas
        seating = self._pools.get(group)
        if seating is not None:
            for replica in replicas:
                if not seating.learned or replica.seats is None:
                    replica.seats = seating.seats(replica)
            if seating.follows and self._policy is not None:
                self._set_capacity(group, replicas, why)
        for tracker, fixed in self._followers.get(group, ()):
            self._starts(group, tracker, fixed)

    def _set_capacity(self, pool: str, replicas: tuple[Replica, ...], why: str) -> None:
        assert self._policy is not None
        capacity = math.floor(sum(r.seats or 0.0 for r in replicas) + _TOLERANCE)
        before = self._policy.capacity(pool)
        if self._policy.set_capacity(pool, capacity):
            log.info(
                "pool %s: capacity %d -> %d (%s; %d routed); reservations %s",
                pool,
                before,
                capacity,
                why,
                len(replicas),
                dict(self._policy.reservations(pool)),
            )

    def _starts(self, group: str, tracker: CapacityTracker, fixed: float | None) -> None:
        seating = self._pools.get(group)
        tracker.set_starts(
            starting_capacities(
                [(replica_name(r), r.weight) for r in self.now(group)],
                pool_start=None if seating is None else seating.capacity,
                fixed=fixed,
                total_weight=None if seating is None else seating.wanted_weight,
            )
        )
