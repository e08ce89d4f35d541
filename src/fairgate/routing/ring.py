"""A consistent-hash ring with virtual nodes, walked clockwise for bounded loads.

Each replica sits at ``vnodes`` points ``H(name#i)``; a key starts at ``H(key)``
and walks clockwise, meeting every replica once. Removing a replica moves only
the keys that lived on it; adding one takes about 1/n of the keys. With
bounded loads (Mirrokni, Thorup, Zadimoghaddam, *Consistent Hashing with
Bounded Loads*, 2018) a key takes the first replica on its walk whose load is
under ``ceil((1 + ε) · (L + 1) / n)``, L being the total load before it: no
replica ever carries more than (1 + ε) times the average, and a key leaves
its home only while the home is over that bound.

H is BLAKE2b (64 bits), the same in every process, so all gateway replicas
agree on every key's home.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping
from itertools import repeat

__all__ = ["HashRing", "load_bound", "point"]


def point(text: str) -> int:
    """Where ``text`` sits on every ring: its BLAKE2b hash, 64 bits."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def load_bound(total_load: int, replicas: int, epsilon: float) -> int:
    """The most a replica may carry after taking one more: ``ceil((1 + ε)(L + 1) / n)``."""
    return math.ceil((1.0 + epsilon) * (total_load + 1) / replicas)


class HashRing:
    """An immutable ring over ``names`` (duplicates ignored), ``vnodes`` points each."""

    __slots__ = ("_count", "_names", "_owners", "_points", "_size")

    def __init__(self, names: Iterable[str], vnodes: int = 64) -> None:
        if vnodes <= 0:
            raise ValueError("vnodes must be positive")
        unique = sorted(set(names))
        ring = sorted((point(f"{name}#{i}"), name) for name in unique for i in range(vnodes))
        self._names = frozenset(unique)
        self._count = len(unique)
        self._points = [p for p, _ in ring]
        self._owners = [name for _, name in ring]
        self._size = len(ring)

    @property
    def names(self) -> frozenset[str]:
        return self._names

    def walk(self, key: str) -> Iterator[str]:
        """Every replica once, in clockwise order from the key's point."""
        if not self._points:
            return
        start = bisect.bisect_left(self._points, point(key))
        seen: set[str] = set()
        size = len(self._points)
        for offset in range(size):
            owner = self._owners[(start + offset) % size]
            if owner not in seen:
                seen.add(owner)
                yield owner
                if len(seen) == len(self._names):
                    return

    def home(
        self, key: str, loads: Mapping[str, int], epsilon: float, *, at: int | None = None
    ) -> str | None:
        """The first replica on the key's walk under the load bound; None for an empty ring.

        ``loads`` gives each replica's current load (missing = 0); ``at`` is the key's
        ``point`` when the caller has it already (it is then not hashed again).
        """
        if not self._count:
            return None
        total = sum(map(loads.get, self._names, repeat(0)))
        # load_bound(total, n, epsilon), written out: once a request
        bound = math.ceil((1.0 + epsilon) * (total + 1) / self._count)
        # The walk of ``walk()``, inlined: a key's home is nearly always its first owner.
        owners, size = self._owners, self._size
        start = bisect.bisect_left(self._points, point(key) if at is None else at)
        passed: set[str] = set()
        for offset in range(size):
            owner = owners[(start + offset) % size]
            if owner in passed:
                continue
            if loads.get(owner, 0) < bound:
                return owner
            passed.add(owner)
        return None  # unreachable: the loads sum to less than n × bound
