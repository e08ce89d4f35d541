"""The waiting line of one band: levels first, then tenants in turn, then arrival order.

    level   lowest first (the fair-share priority number when the controller
            orders by priority, else one level for everybody)
    tenant  round-robin among the tenants (keys) waiting at that level: each
            turn serves the head of the next tenant, who goes to the back of
            the line if it still has waiters; a newcomer joins at the back
    arrival first in, first out within one tenant

So a key with 100 waiters and a key with 1 alternate; opening more
connections buys a key nothing. Every operation is O(1), except that a level
seen for the first time costs O(log levels) (levels are the distinct priority
numbers, at most about a hundred): never O(tenants) or O(waiters).

The queue also knows how many waiters each tenant has over all levels and
which tenant has the most (``crowded``), so a full queue can push out that
tenant's newest waiter (``evict_newest``) rather than refuse a tenant with
fewer: a key that fills the queue does not lock the others out of it.

Worked example (one level): arrivals A1 A2 A3 B1 C1 A4 B2 leave in the order
A1 B1 C1 A2 B2 A3 A4.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["BandQueue", "TenantRoundRobin"]

T = TypeVar("T")


class TenantRoundRobin(Generic[T]):
    """FIFO per tenant, tenants served in turn. Items are identified by a unique int key."""

    def __init__(self) -> None:
        self._tenants: OrderedDict[str, OrderedDict[int, T]] = OrderedDict()
        self._size = 0

    def push(self, key: int, tenant: str, item: T) -> None:
        line = self._tenants.get(tenant)
        if line is None:
            line = self._tenants[tenant] = OrderedDict()
        line[key] = item
        self._size += 1

    def pop(self) -> tuple[int, T]:
        """``(key, item)`` at the head of the next tenant's line; ``IndexError`` when empty."""
        if not self._tenants:
            raise IndexError("pop from an empty queue")
        tenant, line = next(iter(self._tenants.items()))
        key, item = line.popitem(last=False)
        if line:
            self._tenants.move_to_end(tenant)
        else:
            del self._tenants[tenant]
        self._size -= 1
        return key, item

    def remove(self, key: int, tenant: str) -> T | None:
        """Take out the item ``key`` of ``tenant``; ``None`` if it is not here."""
        line = self._tenants.get(tenant)
        if line is None or key not in line:
            return None
        item = line.pop(key)
        if not line:
            del self._tenants[tenant]
        self._size -= 1
        return item

    def __len__(self) -> int:
        return self._size


class BandQueue(Generic[T]):
    """One band's waiters: lowest level first, then ``TenantRoundRobin`` within the level."""

    def __init__(self) -> None:
        self._levels: dict[int, TenantRoundRobin[T]] = {}
        self._heap: list[int] = []  # each key of _levels exactly once
        self._where: dict[int, tuple[int, str]] = {}
        self._mine: dict[str, dict[int, None]] = {}  # each tenant's keys, oldest first
        self._crowds: dict[int, dict[str, None]] = {}  # waiter count → tenants with it
        self._most = 0  # the largest waiter count of any tenant

    def waiting(self, tenant: str) -> int:
        """How many waiters ``tenant`` has, over all levels."""
        keys = self._mine.get(tenant)
        return 0 if keys is None else len(keys)

    def crowded(self) -> tuple[str, int] | None:
        """``(tenant, waiters)`` of a tenant with the most waiters; ``None`` when empty."""
        if not self._most:
            return None
        return next(iter(self._crowds[self._most])), self._most

    def evict_newest(self, tenant: str) -> T | None:
        """Take out the waiter of ``tenant`` that arrived last; ``None`` if it has none."""
        keys = self._mine.get(tenant)
        return None if not keys else self.remove(next(reversed(keys)))

    def _counted(self, tenant: str, key: int, *, joins: bool) -> None:
        keys = self._mine.get(tenant)
        if keys is None:
            keys = self._mine[tenant] = {}
        before = len(keys)
        if joins:
            keys[key] = None
        else:
            del keys[key]
        after = len(keys)
        if before:
            crowd = self._crowds[before]
            del crowd[tenant]
            if not crowd:
                del self._crowds[before]
                if self._most == before and after < before:
                    self._most = after
        if after:
            self._crowds.setdefault(after, {})[tenant] = None
            self._most = max(self._most, after)
        else:
            del self._mine[tenant]

    def push(self, key: int, tenant: str, level: int, item: T) -> None:
        """Queue ``item`` under the unique ``key``; ``ValueError`` if the key is queued already."""
        if key in self._where:
            raise ValueError(f"key {key} is already queued")
        line = self._levels.get(level)
        if line is None:
            line = self._levels[level] = TenantRoundRobin()
            heapq.heappush(self._heap, level)
        line.push(key, tenant, item)
        self._where[key] = (level, tenant)
        self._counted(tenant, key, joins=True)

    def pop(self) -> T | None:
        """The next item to serve, or ``None`` when the queue is empty."""
        while self._heap:
            level = self._heap[0]
            line = self._levels[level]
            if line:
                key, item = line.pop()
                _, tenant = self._where.pop(key)
                self._counted(tenant, key, joins=False)
                return item
            heapq.heappop(self._heap)
            del self._levels[level]
        return None

    def remove(self, key: int) -> T | None:
        """Take out the item ``key`` wherever it waits; ``None`` if it is not queued."""
        place = self._where.pop(key, None)
        if place is None:
            return None
        level, tenant = place
        self._counted(tenant, key, joins=False)
        return self._levels[level].remove(key, tenant)

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def __len__(self) -> int:
        return len(self._where)
