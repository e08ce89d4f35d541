"""All replicas by model, the gateway's in-flight count, and a stop-gap picker.

``pick`` is the simple choice used until ``routing/`` takes over: among the
replicas that are healthy, not excluded and whose breaker admits a request,
the one with the fewest requests in flight; ties go to the larger weight,
then round-robin (one cursor per model, kept here):

    in_flight  a=2 b=0 c=0, weights a=1 b=1 c=2   → c, then b, c, b … as they tie

The breaker is asked with ``allow()`` only for the replica actually chosen,
because admitting a half-open probe takes its one slot.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager

from fairgate.core.replica import ReplicaSnapshot
from fairgate.upstream.replica import Replica

__all__ = ["ReplicaRegistry"]

_log = logging.getLogger(__name__)


class ReplicaRegistry:
    """The replicas of every model, fixed at construction (from configuration).

    A ``(model, name)`` pair must be unique. Methods are synchronous and meant
    for one event loop; ``lease`` is the way the proxy counts a request in flight.
    """

    def __init__(self, replicas: Sequence[Replica]) -> None:
        by_model: dict[str, list[Replica]] = {}
        for replica in replicas:
            group = by_model.setdefault(replica.model, [])
            if any(other.name == replica.name for other in group):
                raise ValueError(f"duplicate replica {replica.name!r} for model {replica.model!r}")
            group.append(replica)
        self._by_model = {model: tuple(group) for model, group in by_model.items()}
        self._all = tuple(replicas)
        self._cursor = dict.fromkeys(self._by_model, 0)

    def models(self) -> Sequence[str]:
        return tuple(self._by_model)

    def all(self) -> Sequence[Replica]:
        return self._all

    def replicas(self, model: str) -> Sequence[Replica]:
        """The replicas of ``model``; empty for an unknown model."""
        return self._by_model.get(model, ())

    def snapshots(self, model: str) -> list[ReplicaSnapshot]:
        return [replica.snapshot() for replica in self.replicas(model)]

    def pick(self, model: str, exclude: Collection[str] = ()) -> Replica | None:
        """The replica for the next request of ``model``, or ``None`` if none may take it.

        ``exclude`` holds replica names already tried for this request.
        """
        eligible = [
            r
            for r in self.replicas(model)
            if r.healthy and r.name not in exclude and not r.breaker.blocked()
        ]
        if not eligible:
            return None
        eligible.sort(key=lambda r: (r.in_flight, -r.weight))
        best = (eligible[0].in_flight, eligible[0].weight)
        ties = [r for r in eligible if (r.in_flight, r.weight) == best]
        turn = self._cursor[model] % len(ties)
        self._cursor[model] += 1
        order = ties[turn:] + ties[:turn] + eligible[len(ties) :]
        for replica in order:
            if replica.breaker.allow():
                return replica
        return None

    def acquire(self, replica: Replica) -> None:
        replica.in_flight += 1

    def release(self, replica: Replica) -> None:
        if replica.in_flight <= 0:
            _log.error("in-flight count of %r released below zero", replica)
            return
        replica.in_flight -= 1

    @contextmanager
    def lease(self, replica: Replica) -> Iterator[Replica]:
        """Count one request in flight on ``replica`` for the duration of the block."""
        self.acquire(replica)
        try:
            yield replica
        finally:
            self.release(replica)

    def ready(self) -> dict[str, bool]:
        """Per model: is at least one replica healthy with a breaker that admits requests?"""
        return {
            model: any(r.healthy and not r.breaker.blocked() for r in group)
            for model, group in self._by_model.items()
        }
