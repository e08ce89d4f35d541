"""The key cache: valid keys and misses in two separate bounded LRU maps with a TTL.

Keeping them apart is the point. A spray of random keys fills the miss map
only: it can push out other misses, never a valid key, so legitimate traffic
keeps being answered from memory while the spray goes on. Each map is bounded
by its size (least recently used entry evicted first) and each entry by its
TTL, counted from when the store answered (reading an entry does not extend
it). A spray never clears either map, and every operation of the request path is
O(1).

A third map remembers, without a TTL, which digests were valid when the store
last answered (``was_valid``). It never authenticates anything: it only tells
the Authenticator that a digest whose cache entry expired is worth a store
lookup outside the failure limits and the lookup ceiling, so a spray cannot lock
out a key this process has served before. A refusal forgets the digest there.

Valid keys are also indexed by what a change can name: their key id, team,
organisation and ``team/project``. ``drop(kind, subject)`` forgets every valid
key of one subject in time proportional to their number; the change watcher
(``fairgate.auth.changes``) calls it for each row of the store's access-change
feed, so a revocation reaches every process within the watcher's interval. The
TTL of valid keys is the backstop: how long a key stays served by a process that
cannot read the feed. ``epoch`` counts the drops, so a store answer read before
a drop is not cached after it (``add_hit(…, epoch=…)``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from fairgate.core.clock import Clock
from fairgate.core.principal import Principal

__all__ = ["Grant", "KeyCache"]

_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class Grant:
    """What a valid secret authenticates as, and until when.

    ``until`` is Unix time in seconds after which this secret no longer
    authenticates even while cached: the key's expiry, or for the secret a
    rotation replaced, the end of its grace period (``math.inf``: never).
    """

    principal: Principal
    until: float = math.inf


class _Bounded(Generic[_V]):
    """An LRU map of at most ``size`` entries, each readable for ``ttl`` seconds after its put.

    ``on_drop(key, value)`` is called for every entry that leaves the map, whatever the
    reason (evicted, expired, replaced, popped).
    """

    def __init__(
        self, size: int, ttl: float, on_drop: Callable[[bytes, _V], None] | None = None
    ) -> None:
        if size < 1:
            raise ValueError(f"cache size must be at least 1, not {size}")
        if not ttl > 0:
            raise ValueError(f"cache TTL must be positive, not {ttl}")
        self._size = size
        self._ttl = ttl
        self._entries: OrderedDict[bytes, tuple[float, _V]] = OrderedDict()
        self._on_drop = on_drop or (lambda _key, _value: None)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes, now: float) -> _V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        deadline, value = entry
        if now >= deadline:
            del self._entries[key]
            self._on_drop(key, value)
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: bytes, value: _V, now: float) -> None:
        self.pop(key)
        self._entries[key] = (now + self._ttl, value)
        if len(self._entries) > self._size:
            old, (_, old_value) = self._entries.popitem(last=False)
            self._on_drop(old, old_value)

    def keys(self) -> list[bytes]:
        return list(self._entries)

    def pop(self, key: bytes) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._on_drop(key, entry[1])


class KeyCache:
    """Valid keys and misses by SHA-256 digest, in two separate bounded maps.

    ``hit_size``/``miss_size`` (≥ 1) bound the number of entries of each map;
    ``hit_ttl``/``miss_ttl`` (seconds, > 0, on ``clock.monotonic()``) bound how
    long an entry is used after the store answered (``was_valid`` has no TTL).
    ``hit_ttl`` is therefore the longest a change missed by the change watcher
    goes unnoticed, and ``miss_ttl`` how long a digest the store did not accept
    keeps being refused without asking it again. Memory (measured): about 250
    bytes per miss, under 1 KB per valid key (its four index entries included).
    """

    def __init__(
        self, hit_size: int, hit_ttl: float, miss_size: int, miss_ttl: float, clock: Clock
    ) -> None:
        self._hits: _Bounded[Grant] = _Bounded(hit_size, hit_ttl, self._unindex)
        self._misses: _Bounded[bool] = _Bounded(miss_size, miss_ttl)
        self._known: _Bounded[bool] = _Bounded(hit_size, math.inf)
        self._index: dict[str, set[bytes]] = {}  # "team:lab-nlp" → digests of valid keys
        self._clock = clock
        self.epoch = 0
        """How many drops so far: a store answer read at an older epoch is not cached."""

    def hit(self, digest: bytes) -> Grant | None:
        """The grant cached for ``digest`` within its TTL, or None."""
        return self._hits.get(digest, self._clock.monotonic())

    def is_miss(self, digest: bytes) -> bool:
        """Whether the store refused ``digest`` less than ``miss_ttl`` ago."""
        return self._misses.get(digest, self._clock.monotonic()) is not None

    def was_valid(self, digest: bytes) -> bool:
        """Whether the store last answered ``digest`` as valid (however long ago; at most
        ``hit_size`` digests remembered, least recently used forgotten first)."""
        return self._known.get(digest, self._clock.monotonic()) is not None

    def add_hit(self, digest: bytes, grant: Grant, *, epoch: int | None = None) -> None:
        """Cache a valid secret; it stops being a miss.

        ``epoch``: the ``epoch`` when the store was asked; if a drop happened since,
        the answer may predate a change and is not cached (the digest is still
        remembered as valid).
        """
        now = self._clock.monotonic()
        self._misses.pop(digest)
        self._known.put(digest, True, now)
        if epoch is not None and epoch != self.epoch:
            return
        self._hits.put(digest, grant, now)
        for label in _labels(grant):
            self._index.setdefault(label, set()).add(digest)

    def add_miss(self, digest: bytes) -> None:
        """Cache a refusal (unknown, revoked, expired); it stops being a hit or known valid."""
        self._hits.pop(digest)
        self._known.pop(digest)
        self._misses.put(digest, True, self._clock.monotonic())

    def invalidate(self, digest: bytes) -> None:
        """Forget ``digest`` as a hit and a miss: its next use asks the store (a local revoke)."""
        self._hits.pop(digest)
        self._misses.pop(digest)

    def drop(self, kind: str, subject: str) -> int:
        """Forget every valid key of ``kind`` (key | team | project | org) ``subject``;
        how many were forgotten. An unknown kind forgets every valid key."""
        self.epoch += 1
        if kind not in _KINDS:
            digests = set(self._hits.keys())
        else:
            digests = set(self._index.get(f"{kind}:{subject}", ()))
        for digest in digests:
            self._hits.pop(digest)
        return len(digests)

    def _unindex(self, digest: bytes, grant: Grant) -> None:
        for label in _labels(grant):
            holders = self._index.get(label)
            if holders is not None:
                holders.discard(digest)
                if not holders:
                    del self._index[label]

    def sizes(self) -> tuple[int, int]:
        """``(valid keys, misses)`` currently held, expired entries not yet evicted included."""
        return len(self._hits), len(self._misses)


_KINDS = frozenset({"key", "team", "project", "org"})


def _labels(grant: Grant) -> Iterator[str]:
    """The index entries of a valid key: what a change may name it by."""
    p = grant.principal
    yield f"key:{p.key_id}"
    yield f"team:{p.team}"
    yield f"org:{p.org}"
    if p.project is not None:
        yield f"project:{p.team}/{p.project}"
