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

__all__ = ["HashRing", "load_bound"]


def _point(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def load_bound(total_load: int, replicas: int, epsilon: float) -> int:
    """The most a replica may carry after taking one more: ``ceil((1 + ε)(L + 1) / n)``."""
    return math.ceil((1.0 + epsilon) * (total_load + 1) / replicas)


class HashRing:
    """An immutable ring over ``names`` (duplicates ignored), ``vnodes`` points each."""

    __slots__ = ("_names", "_owners", "_points")

    def __init__(self, names: Iterable[str], vnodes: int = 64) -> None:
        if vnodes <= 0:
            raise ValueError("vnodes must be positive")
        unique = sorted(set(names))
        ring = sorted((_point(f"{name}#{i}"), name) for name in unique for i in range(vnodes))
        self._names = frozenset(unique)
        self._points = [p for p, _ in ring]
        self._owners = [name for _, name in ring]

    @property
    def names(self) -> frozenset[str]:
        return self._names

    def walk(self, key: str) -> Iterator[str]:
        """Every replica once, in clockwise order from the key's point."""
        if not self._points:
            return
        start = bisect.bisect_left(self._points, _point(key))
        seen: set[str] = set()
        size = len(self._points)
        for offset in range(size):
            owner = self._owners[(start + offset) % size]
            if owner not in seen:
                seen.add(owner)
                yield owner
                if len(seen) == len(self._names):
                    return

    def home(self, key: str, loads: Mapping[str, int], epsilon: float) -> str | None:
        """The first replica on the key's walk under the load bound; None for an empty ring.

        ``loads`` gives each replica's current load (missing = 0).
        """
        if not self._names:
            return None
        total = sum(map(loads.get, self._names, repeat(0)))
        bound = load_bound(total, len(self._names), epsilon)
        # The walk of ``walk()``, inlined: a key's home is nearly always its first owner.
        owners, size = self._owners, len(self._owners)
        start = bisect.bisect_left(self._points, _point(key))
        passed: set[str] = set()
        for offset in range(size):
            owner = owners[(start + offset) % size]
            if owner in passed:
                continue
            if loads.get(owner, 0) < bound:
                return owner
            passed.add(owner)
        return None  # unreachable: the loads sum to less than n × bound
