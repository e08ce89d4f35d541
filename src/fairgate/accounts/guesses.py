"""Sign-in guess limits: failed sign-ins counted per e-mail address and per client network.

    guesses = MemoryGuesses(per_address=10, per_network=100, window=900, clock=clock)
    wait = await guesses.blocked("alice@example.org", "192.0.2.7")   # None, or seconds
    await guesses.failed("alice@example.org", "192.0.2.7")           # after a refusal
    await guesses.forget("alice@example.org")                        # after a success

Per address, not per IP: an attacker spraying one address from a thousand
machines gets ``per_address`` guesses per window in all. The network ceiling
(an IPv4 address or an IPv6 /64, ``fairgate.core.network``) stops one client
trying many addresses. Counts are the usual two-window estimate over aligned
windows of ``window`` seconds (the current one plus the previous one weighted
by its overlap). A locked-out address is also locked for its owner until the
window slides: the price of refusing to let anyone keep guessing.

Both counters live in memory (one process) or in Redis (``RedisGuesses``,
shared by every replica). Addresses are kept only as their SHA-256.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from fairgate.core.clock import Clock
from fairgate.core.network import network_of

__all__ = ["GuessCounter", "MemoryGuesses", "address_key", "network_key"]

_MAX_COUNTERS = 200_000


class GuessCounter(Protocol):
    """Where guesses are counted. ``blocked`` is the seconds to wait when the address or the
    network is at its limit, else None; ``failed`` counts one guess against both;
    ``forget`` clears an address after a successful sign-in."""

    async def blocked(self, address: str, network: str) -> float | None: ...

    async def failed(self, address: str, network: str) -> None: ...

    async def forget(self, address: str) -> None: ...


def address_key(address: str) -> str:
    """The counter name of an address: its SHA-256, so no address sits in Redis or memory."""
    return "a:" + hashlib.sha256(address.encode()).hexdigest()


def network_key(peer: str) -> str:
    """The counter name of a client address's network (IPv4 address, IPv6 /64)."""
    return f"n:{network_of(peer)}"


class _Window:
    __slots__ = ("current", "index", "previous")

    def __init__(self, index: int) -> None:
        self.index = index
        self.previous = 0
        self.current = 0

    def roll(self, index: int) -> None:
        if index == self.index:
            return
        self.previous = self.current if index == self.index + 1 else 0
        self.current = 0
        self.index = index

    def estimate(self, weight: float) -> float:
        return self.current + self.previous * weight


class MemoryGuesses:
    """Guess counters of one process. At most ``max_counters`` are held; when full, windows
    that have aged out are dropped first, then the oldest (a full table of live counters
    means a flood: dropping one then frees one attacker's count, never adds guesses to an
    address that is not being guessed)."""

    def __init__(
        self,
        *,
        per_address: int,
        per_network: int,
        window: float,
        clock: Clock,
        max_counters: int = _MAX_COUNTERS,
    ) -> None:
        self._limits = {"a": per_address, "n": per_network}
        self._window = window
        self._clock = clock
        self._max = max_counters
        self._counts: dict[str, _Window] = {}

    async def blocked(self, address: str, network: str) -> float | None:
        waits = [self._wait(address_key(address)), self._wait(network_key(network))]
        over = [wait for wait in waits if wait is not None]
        return max(over) if over else None

    async def failed(self, address: str, network: str) -> None:
        index = self._index()
        for key in (address_key(address), network_key(network)):
            counter = self._counts.pop(key, None) or _Window(index)
            counter.roll(index)
            counter.current += 1
            self._counts[key] = counter  # to the end: the dict is oldest-first
        while len(self._counts) > self._max:
            del self._counts[next(iter(self._counts))]

    async def forget(self, address: str) -> None:
        self._counts.pop(address_key(address), None)

    def _index(self) -> int:
        return int(self._clock.wall() // self._window)

    def _wait(self, key: str) -> float | None:
        counter = self._counts.get(key)
        if counter is None:
            return None
        now = self._clock.wall()
        index = int(now // self._window)
        counter.roll(index)
        elapsed = now - index * self._window
        weight = 1.0 - elapsed / self._window
        limit = self._limits[key[0]]
        if counter.estimate(weight) < limit:
            return None
        return _until_below(counter, limit, elapsed, self._window)


def _until_below(counter: _Window, limit: int, elapsed: float, window: float) -> float:
    """Seconds until the estimate falls below ``limit`` with no new guess."""
    if counter.current >= limit:
        # this window's guesses weigh current * (1 - t/window) into the next window
        return max(1.0, window - elapsed + window * (1.0 - limit / counter.current))
    # previous * (1 - t/window) + current < limit  ⇔  t > window * (1 - (limit-current)/previous)
    needed = window * (1.0 - (limit - counter.current) / counter.previous)
    return max(1.0, needed - elapsed)
