"""The recorder's queue: bounded in total, shared between tenants so none can crowd out another.

A tenant is a team (its organisation and name, as the record names them: the
tenant admission uses too). A record is **served** when the request reached an
engine (``replica`` set, or at least one upstream attempt): it may have used a
GPU, and its loss would be spend nobody is charged. Every other record
(refused by the gateway, ``GET /v1/models``, ``GET /me``) is **unserved**.

While the queue holds fewer than ``capacity`` records, every record is queued.
When it is full, a new record takes the place of another one or is dropped:

- a served record displaces the newest unserved record of the tenant holding
  the most unserved records (possibly its own);
- with no unserved record queued, a served record displaces the newest served
  record of the tenant holding the most served records, if that tenant holds
  more than the newcomer's tenant; otherwise the newcomer is dropped;
- an unserved record displaces the newest unserved record of the tenant holding
  the most unserved records, if that tenant holds more than the newcomer's;
  otherwise it is dropped. It never displaces a served record.

So an unserved record never costs a served one, and a tenant loses a record
only while it holds at least as many queued records of that kind as any other
tenant. Worked example, capacity 4: tenant A queued 4 refusals; B's refusal
displaces one of A's (A 3, B 1); B's served record displaces another of A's
(A 2, B 1 + 1 served); A's next refusal is dropped (A already holds the most).
"""

from __future__ import annotations

from collections import deque

from fairgate.accounting.record import UsageRecord

__all__ = ["TenantQueue", "is_served"]

_Tenant = tuple[str, str]


def is_served(record: UsageRecord) -> bool:
    """Whether the record's request reached an engine (and so may have used a GPU)."""
    return bool(record.replica) or record.attempts > 0


class TenantQueue:
    """At most ``capacity`` (≥ 1) records, kept by tenant and kind; see the module docstring.

    Not thread-safe: one event loop owns it.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._capacity = capacity
        # kind (served?) → tenant → its records of that kind, oldest first; no empty deque
        self._lanes: dict[bool, dict[_Tenant, deque[UsageRecord]]] = {True: {}, False: {}}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, record: UsageRecord) -> UsageRecord | None:
        """Queue ``record``; returns the record that was dropped to make room (``record``
        itself when it did not fit), None when nothing was dropped."""
        served = is_served(record)
        tenant = (record.org, record.team)
        if self._size >= self._capacity:
            victim = self._displaced(served, tenant)
            if victim is None:
                return record
            self._append(served, tenant, record)
            return victim
        self._append(served, tenant, record)
        self._size += 1
        return None

    def take(self, count: int) -> list[UsageRecord]:
        """Up to ``count`` records, oldest first within each tenant, served ones first."""
        batch: list[UsageRecord] = []
        for served in (True, False):
            lanes = self._lanes[served]
            for tenant in list(lanes):
                lane = lanes[tenant]
                while lane and len(batch) < count:
                    batch.append(lane.popleft())
                if not lane:
                    del lanes[tenant]
                if len(batch) >= count:
                    break
        self._size -= len(batch)
        return batch

    def clear(self) -> None:
        for lanes in self._lanes.values():
            lanes.clear()
        self._size = 0

    def _append(self, served: bool, tenant: _Tenant, record: UsageRecord) -> None:
        lanes = self._lanes[served]
        lane = lanes.get(tenant)
        if lane is None:
            lane = lanes[tenant] = deque()
        lane.append(record)

    def _displaced(self, served: bool, tenant: _Tenant) -> UsageRecord | None:
        """Remove and return the record a newcomer of this kind and tenant replaces, if any."""
        unserved = self._lanes[False]
        if unserved:
            heaviest = max(unserved, key=lambda t: len(unserved[t]))
            if served or len(unserved[heaviest]) > len(unserved.get(tenant, ())):
                return self._pop_newest(False, heaviest)
            return None
        if not served:
            return None
        lanes = self._lanes[True]
        heaviest = max(lanes, key=lambda t: len(lanes[t]))
        if len(lanes[heaviest]) > len(lanes.get(tenant, ())):
            return self._pop_newest(True, heaviest)
        return None

    def _pop_newest(self, served: bool, tenant: _Tenant) -> UsageRecord:
        lanes = self._lanes[served]
        lane = lanes[tenant]
        record = lane.pop()
        if not lane:
            del lanes[tenant]
        return record
