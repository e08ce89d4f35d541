"""Pools whose capacity is learned (``capacity: auto``): the replicas' readings in, C out.

    follower = PoolCapacity(policy, {"b300": (learner, replicas)}, clock=time.monotonic)
    follower.update()                   # one step; PeriodicTask runs it every health interval
    follower.learned("b300")            # Learned: C, per-replica values, why C last moved

Each step hands every replica's last scraped load (running, KV use, the
preemption counter; unknown once stale), its health check's verdict and its weight to the pool's
``CapacityLearner`` (``fairgate.fairshare.learned_capacity``), then applies what
it learned: ``FairShare.set_capacity`` apportions the reservations again when C
moved, and each replica's ``seats`` become its part of C. A move of C is logged
at INFO with its reason; the request path only ever reads the results.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from fairgate.fairshare import FairShare
from fairgate.fairshare.learned_capacity import CapacityLearner, Learned, Reading
from fairgate.upstream.periodic import PeriodicTask
from fairgate.upstream.replica import Replica

__all__ = ["PoolCapacity", "replica_name"]

log = logging.getLogger("fairgate.fairshare")


def replica_name(replica: Replica) -> str:
    """How a replica is named in a learned capacity: ``model/name``."""
    return f"{replica.model}/{replica.name}"


class PoolCapacity:
    """Learns the capacity of each pool in ``pools`` (pool → its learner and replicas) and
    applies it to ``policy`` and to the replicas' seats; ``clock`` is monotonic seconds."""

    def __init__(
        self,
        policy: FairShare,
        pools: Mapping[str, tuple[CapacityLearner, Sequence[Replica]]],
        clock: Callable[[], float],
    ) -> None:
        self._policy = policy
        self._pools = dict(pools)
        self._clock = clock
        self._loop: PeriodicTask | None = None

    @property
    def pools(self) -> tuple[str, ...]:
        return tuple(self._pools)

    def learned(self, pool: str) -> Learned | None:
        """What ``pool``'s learner knows now; ``None`` for a pool of fixed capacity."""
        found = self._pools.get(pool)
        return found[0].learned if found is not None else None

    def update(self) -> None:
        """One step for every learned pool."""
        now = self._clock()
        for pool, (learner, replicas) in self._pools.items():
            learned = learner.observe([_reading(r) for r in replicas], now)
            before = self._policy.capacity(pool)
            if self._policy.set_capacity(pool, learned.capacity):
                log.info(
                    "pool %s: capacity %d -> %d (%s); reservations %s",
                    pool,
                    before,
                    learned.capacity,
                    learned.reason,
                    dict(self._policy.reservations(pool)),
                )
            seats = learned.seats({replica_name(r): r.weight for r in replicas})
            for replica in replicas:
                replica.seats = seats[replica_name(replica)]

    def start(self, interval: float) -> None:
        """Run ``update`` every ``interval`` seconds until ``stop``."""

        async def step() -> None:
            self.update()

        self._loop = PeriodicTask("fairgate-pool-capacity", interval, step)
        self._loop.start()

    async def stop(self) -> None:
        if self._loop is not None:
            await self._loop.stop()


def _reading(replica: Replica) -> Reading:
    load = replica.fresh_load()
    return Reading(
        replica_name(replica),
        healthy=replica.healthy,
        running=None if load is None else load.running,
        kv_usage=None if load is None else load.kv_usage,
        preemptions=None if load is None else load.preemptions,
        weight=replica.weight,
    )
