"""Borrowers held back by the gateway while their pool is full, served by their rank *now*.

Pure: no I/O, no event loop; ranks are handed in.

A borrower sent to an engine at once carries the priority of its organisation's
Fair Tree rank at arrival, and keeps it while it waits in the engine's queue
(vLLM cannot re-prioritise a queued request). Held here instead, it is ordered
by what its organisation ranks when a seat frees:

    order = (rank of the organisation now, class, arrival)      lowest first

which is the order of the priority ``10 + 10 · rank + class`` the engine would
see if every held request were sent now, ties by arrival. Ranks change as usage
moves; ``rerank`` gives the new ones, and the next ``pop`` follows them. A
borrower is held under an owner, ``(organisation, team)``: with team
sub-shares the Fair Tree ranks each organisation's teams too, and the rank
given is the owner's (the team is ``""`` otherwise).

Cost: ``push`` and ``remove`` are O(1) (plus O(log lines) when a line starts);
``pop`` is O(log lines) amortised, a line being one (organisation, class) with
waiters; ``rerank`` is O(lines) when a rank changed, O(organisations) to check.
Never O(waiters).

Worked example: A1 A2 (interactive) and B1 (batch) wait, in that order; ranks
A 1, B 0. ``pop`` gives B1 (rank 0 first, whatever its class), then A1. A3
arrives, then B ranks 1 too: A2 (rank 1, interactive) goes before B's batch
requests, then A3.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Mapping
from typing import Generic, TypeVar

__all__ = ["SEATLESS", "HeldBorrowers", "Owner"]

T = TypeVar("T")

SEATLESS = 2
"""Classes from this one up hold borrowers that can never take a seat of their
organisation's reservation (a request of several sequences always borrows): ordered
after the seated classes of their rank, and never given by ``pop_org``."""

Owner = tuple[str, str]  # (organisation, team or "")
_Line = tuple[Owner, int]  # (owner, class)


class HeldBorrowers(Generic[T]):
    """Held borrowers of one pool, each under a unique int key.

    The rank of an owner is what ``rerank`` last gave (0 until then, and for an
    owner it did not name); ``cls`` is the priority class (0 interactive, 1 batch).
    """

    def __init__(self) -> None:
        self._lines: dict[_Line, OrderedDict[int, tuple[int, T]]] = {}
        self._where: dict[int, _Line] = {}
        self._ranks: dict[Owner, int] = {}
        self._heap: list[tuple[int, int, int, Owner]] = []  # (rank, cls, arrival, owner)
        self._arrivals = itertools.count()

    def push(
        self, key: int, org: str, cls: int, item: T, team: str = "", arrival: int | None = None
    ) -> int:
        """Hold ``item`` behind every earlier arrival and return its arrival;
        ``ValueError`` if ``key`` is held.

        ``arrival``, one an earlier ``push`` returned, holds it again at the place it had
        (a borrower let go that must wait again keeps its turn): O(its line) then."""
        if key in self._where:
            raise ValueError(f"key {key} is already held")
        line = ((org, team), cls)
        entries = self._lines.get(line)
        if entries is None:
            entries = self._lines[line] = OrderedDict()
        later: list[int] = []
        if arrival is None:
            arrival = next(self._arrivals)  # the latest: at the end of its line
        else:
            later = [k for k, (a, _) in entries.items() if a > arrival]
        entries[key] = (arrival, item)
        for k in later:
            entries.move_to_end(k)
        self._where[key] = line
        if next(iter(entries)) == key:
            self._push_head(line, arrival)  # the head it replaces is stale in the heap
        return arrival

    def remove(self, key: int) -> T | None:
        """Take out the item held under ``key`` (its caller left); ``None`` if not held."""
        line = self._where.pop(key, None)
        if line is None:
            return None
        entries = self._lines[line]
        was_head = next(iter(entries)) == key
        _, item = entries.pop(key)
        if not entries:
            del self._lines[line]
        elif was_head:
            self._push_head(line, next(iter(entries.values()))[0])
        return item

    def pop(self) -> T | None:
        """The best held item by (rank, class, arrival); ``None`` when nothing is held."""
        while self._heap:
            rank, cls, arrival, owner = self._heap[0]
            line = (owner, cls)
            entries = self._lines.get(line)
            if (
                entries is None
                or self._ranks.get(owner, 0) != rank
                or next(iter(entries.values()))[0] != arrival
            ):
                heapq.heappop(self._heap)  # stale: that head left, or the rank moved
                continue
            return self._take_head(line)
        return None

    def pop_org(self, org: str, team: str | None = None) -> T | None:
        """``org``'s best held item by (class, arrival), whatever the ranks (a seat of its
        reservation came free): of ``team`` when given, else of any of its teams, and
        never of a class that cannot take the seat (``SEATLESS``); ``None`` when it has
        none held. O(lines)."""
        if not self._where:
            return None  # nothing held (as nearly always): once a request
        heads = [
            (cls, next(iter(entries.values()))[0], (owner, cls))
            for (owner, cls), entries in self._lines.items()
            if owner[0] == org and cls < SEATLESS and (team is None or owner[1] == team)
        ]
        if not heads:
            return None
        return self._take_head(min(heads)[2])

    def rerank(self, ranks: Mapping[Owner, int]) -> None:
        """Serve by ``ranks`` (owner → rank) from now on; cheap when nothing moved."""
        waiting = self.owners()
        if all(ranks.get(owner, 0) == self._ranks.get(owner, 0) for owner in waiting):
            self._ranks = {owner: ranks.get(owner, 0) for owner in waiting}
            return
        self._ranks = {owner: ranks.get(owner, 0) for owner in waiting}
        self._heap = [
            (self._ranks[owner], cls, next(iter(entries.values()))[0], owner)
            for (owner, cls), entries in self._lines.items()
        ]
        heapq.heapify(self._heap)

    def owners(self) -> set[Owner]:
        """The owners, (organisation, team), with something held."""
        return {owner for owner, _ in self._lines}

    def held(self, org: str) -> int:
        """How many items of ``org`` are held, all its teams together. O(lines)."""
        return sum(len(entries) for (owner, _), entries in self._lines.items() if owner[0] == org)

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def __len__(self) -> int:
        return len(self._where)

    def _take_head(self, line: _Line) -> T:
        entries = self._lines[line]
        key, (_, item) = entries.popitem(last=False)
        del self._where[key]
        if entries:
            self._push_head(line, next(iter(entries.values()))[0])
        else:
            del self._lines[line]
        return item

    def _push_head(self, line: _Line, arrival: int) -> None:
        owner, cls = line
        heapq.heappush(self._heap, (self._ranks.get(owner, 0), cls, arrival, owner))
        if len(self._heap) > 2 * len(self._lines) + 16:
            # stale entries of heads that left (callers gone) are dropped lazily at the
            # top only; rebuild now and then so they cannot pile up below it
            self._heap = [
                (self._ranks.get(o, 0), c, next(iter(entries.values()))[0], o)
                for (o, c), entries in self._lines.items()
            ]
            heapq.heapify(self._heap)
