"""Back ends of ``fairgate.limits.CounterStore``: memory (one process) and Redis (shared).

    MemoryCounterStore()                               the default, one gateway process
    RedisCounterStore(url, prefix=..., timeout=...)    several gateways, one set of limits
    RedisNotices(url, prefix=..., timeout=...)         access-change wake-ups (pub/sub)
    MemoryResponseOwners / RedisResponseOwners         who may continue a response (state.owners)

Both also implement ``fairgate.limits.FairShareState`` (within-share slots and
decayed usage per pool and organisation), on the same connection and leases.

Errors: every Redis failure, timeout or open breaker is raised as
``fairgate.limits.StateUnavailable``; the limiter alone decides what a request
gets then (``fairgate.limits.limiter``).
"""

from fairgate.core.breaker import Breaker
from fairgate.state.memory import MemoryCounterStore
from fairgate.state.notices import RedisNotices
from fairgate.state.owners import MemoryResponseOwners, RedisResponseOwners
from fairgate.state.redis import RedisCounterStore

__all__ = [
    "Breaker",
    "MemoryCounterStore",
    "MemoryResponseOwners",
    "RedisCounterStore",
    "RedisNotices",
    "RedisResponseOwners",
]
