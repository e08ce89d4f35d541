"""Failed authentications limited per client network, before any store lookup.

A network is an IPv4 address or an IPv6 /64 (what one subscriber usually
holds; an IPv4-mapped IPv6 address counts as its IPv4 address). Each network
may fail ``per_minute`` times in a sliding minute; past that, ``blocked``
returns the seconds to wait and the caller answers 429 without asking the store.

The sliding minute is the usual two-window estimate: failures in the current
aligned 60 s window, plus those of the previous window weighted by how much of
it still overlaps the last 60 s. Worked example, ``per_minute`` = 60: 60
failures at 0:50, then at 1:15 the estimate is 60 × (45/60) = 45, so 15 more
failures are allowed; a network that keeps failing gets about 60 a minute.

Memory is bounded: at most ``max_networks`` networks are tracked, each in one
entry of about 200 bytes. When that many are tracked, the one whose last failure is oldest
is forgotten. An attacker who spoofs or owns very many networks could so evict
counters; that only lets them retry sooner, it never blocks anyone else.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict

from fairgate.core.clock import Clock

__all__ = ["FailureLimiter"]

_WINDOW = 60.0
_PURGE_PER_CALL = 2


class _Count:
    """Failures of one network in the current and the previous aligned window."""

    __slots__ = ("current", "previous", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self.previous = 0
        self.current = 0

    def roll(self, window: int) -> None:
        if window == self.window:
            return
        self.previous = self.current if window == self.window + 1 else 0
        self.current = 0
        self.window = window


class FailureLimiter:
    """Counts failed authentications per network and says when a network must wait.

    ``per_minute`` (≥ 0) failures are allowed per sliding minute; 0 disables
    the limiter (``blocked`` is always None). ``max_networks`` (≥ 1) bounds the
    networks tracked. Time is ``clock.monotonic()``. An address that is not an
    IP address (a Unix socket peer) is its own network, keyed by its text.
    """

    def __init__(self, per_minute: int, clock: Clock, *, max_networks: int = 100_000) -> None:
        if per_minute < 0:
            raise ValueError(f"per_minute must be 0 (disabled) or more, not {per_minute}")
        if max_networks < 1:
            raise ValueError(f"max_networks must be at least 1, not {max_networks}")
        self._limit = per_minute
        self._clock = clock
        self._max = max_networks
        self._counts: OrderedDict[int | str, _Count] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self._limit > 0

    @property
    def tracked(self) -> int:
        """Networks currently tracked (at most ``max_networks``)."""
        return len(self._counts)

    def blocked(self, addr: str) -> float | None:
        """Seconds until ``addr``'s network may try again, or None if it may now."""
        if not self._limit:
            return None
        count = self._counts.get(_network(addr))
        if count is None:
            return None
        now = self._clock.monotonic()
        window = int(now // _WINDOW)
        count.roll(window)
        into = now - window * _WINDOW
        if count.previous * (1.0 - into / _WINDOW) + count.current < self._limit:
            return None
        if count.current < self._limit:
            # The previous window's share decays below the room left in this one.
            room = (self._limit - count.current) / count.previous
            return max(0.0, _WINDOW * (1.0 - room) - into)
        # Wait for the next window, then for this one's share to decay below the limit.
        return (_WINDOW - into) + _WINDOW * (1.0 - self._limit / count.current)

    def failed(self, addr: str) -> None:
        """Count one failed authentication from ``addr``'s network."""
        if not self._limit:
            return
        key = _network(addr)
        window = int(self._clock.monotonic() // _WINDOW)
        count = self._counts.get(key)
        if count is None:
            self._purge(window)
            count = self._counts[key] = _Count(window)
            if len(self._counts) > self._max:
                self._counts.popitem(last=False)
        else:
            self._counts.move_to_end(key)
        count.roll(window)
        count.current += 1

    def _purge(self, window: int) -> None:
        """Forget a few networks whose failures are all older than the sliding minute."""
        for _ in range(_PURGE_PER_CALL):
            if not self._counts:
                return
            oldest = next(iter(self._counts.values()))
            if oldest.window >= window - 1 and (oldest.current or oldest.window == window):
                return
            self._counts.popitem(last=False)


def _network(addr: str) -> int | str:
    """The key of ``addr``'s network: an IPv4 address or an IPv6 /64, as one integer."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped
        if mapped is None:
            # Above every IPv4 value (< 2**32), so the two families never collide.
            return (1 << 64) | (int(ip) >> 64)
        ip = mapped
    return int(ip)
