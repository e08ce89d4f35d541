"""Pool saturation: one number per pool, the worse of its queue part and its KV part.

Pure: snapshots, learned capacities and the pending count are handed in.

Over the replicas that can take traffic (healthy, breaker closed), with C_r the
learned batch capacity of replica r (``CapacityTracker``)::

    queue part = (Σ in_flight_r + pending) / Σ C_r
    KV part    = (Σ C_r · kv_r / Σ C_r, over the replicas reporting kv) / kv_limit
    saturation = max(queue part, KV part)

``in_flight`` is the gateway's own count (always known, never lags a scrape);
``pending`` counts the requests admission granted that no replica has seen yet.
The queue part is *demand over batch capacity*: below 1.0 there are free batch
slots; 1.0 means every batch is full and nothing waits in an engine, the
healthy limit; above 1.0 the engines queue, by ``saturation − 1`` times their
capacity. In terms of what is really queued (in flight minus batch capacity)::

    queued = Σ in_flight + pending − Σ C        saturation = 1 + queued / Σ C

The normalisation puts "full" where the gateway stops being able to reorder
anything: a request sent past it waits in an engine's FIFO queue, where no band
helps it. The KV part catches engines whose batch is bound by KV memory rather
than by a request count (long contexts), where the learned count overestimates.

Worked example: two replicas with learned capacity 32 each (Σ C = 64), in
flight 40 and 8, pending 4, KV usage 0.5 and 0.9, kv_limit 0.9. Queue part =
(48 + 4) / 64 = 0.8125; KV part = (32·0.5 + 32·0.9) / 64 / 0.9 = 0.7 / 0.9 =
0.778; saturation = 0.8125. Bronze (ceiling 0.8) waits, gold (1.0) passes.

Stale or unknown engine metrics (``kv_usage is None``) leave the KV part to the
replicas that report it, or to nothing (then the queue part alone decides,
counted by the gateway). No replica that can take traffic → ``math.inf``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from fairgate.core.replica import ReplicaSnapshot

__all__ = ["DEFAULT_KV_LIMIT", "replica_key", "saturation"]

DEFAULT_KV_LIMIT = 0.9
"""KV occupancy at which a pool counts as full: vLLM preempts as it nears 1.0."""


def replica_key(replica: ReplicaSnapshot) -> str:
    """The key of a replica in learned-capacity maps: ``model/name`` (names are per model)."""
    return f"{replica.model}/{replica.name}"


def saturation(
    snapshots: Sequence[ReplicaSnapshot],
    learned_capacity: Mapping[str, float],
    pending: int,
    *,
    kv_limit: float = DEFAULT_KV_LIMIT,
    default_capacity: float = 1.0,
) -> float:
    """The pool's saturation, >= 0 (1.0 = full); ``math.inf`` when no replica can take traffic.

    ``learned_capacity`` maps ``replica_key`` to a batch capacity (> 0); a
    replica missing from it counts ``default_capacity``. ``pending`` >= 0;
    ``kv_limit`` in (0, 1]. Raises ``ValueError`` on values out of range.
    O(replicas).
    """
    if pending < 0:
        raise ValueError(f"pending must be >= 0, got {pending!r}")
    if not 0.0 < kv_limit <= 1.0:
        raise ValueError(f"kv_limit must be in (0, 1], got {kv_limit!r}")
    demand = float(pending)
    capacity = 0.0
    kv_weighted = 0.0
    kv_capacity = 0.0
    get = learned_capacity.get
    # Two readings a request: the key (``replica_key``) and the clamp are written out.
    for replica in snapshots:
        if not replica.healthy or replica.breaker_open:
            continue
        c = get(f"{replica.model}/{replica.name}", default_capacity)
        if not c > 0:
            raise ValueError(f"capacity of {replica_key(replica)} must be > 0, got {c!r}")
        capacity += c
        demand += replica.in_flight
        kv = replica.kv_usage
        if kv is not None:
            kv_weighted += c * (0.0 if kv < 0.0 else 1.0 if kv > 1.0 else kv)
            kv_capacity += c
    if capacity == 0.0:
        return math.inf
    queue_part = demand / capacity
    kv_part = kv_weighted / kv_capacity / kv_limit if kv_capacity else 0.0
    return kv_part if kv_part > queue_part else queue_part  # max(), without the call
