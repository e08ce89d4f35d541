"""Failed authentications limited per client network and per aggregate of networks.

A network is an IPv4 address or an IPv6 /64 (what one subscriber usually
holds; an IPv4-mapped IPv6 address counts as its IPv4 address): the rule of
``fairgate.core.network``, which the listeners' connection caps count by too. Each network
may fail ``per_minute`` times in a sliding minute (``fairgate.auth.window``).
Networks are also counted together in aggregates, each with a ceiling of its
own: the IPv4 /24, the IPv6 /48 (one site) and the IPv6 /32 (one provider's
allocation). A network is *over its limits* when it, or any aggregate it
belongs to, is at its ceiling; ``blocked`` then returns the seconds to wait.
What being over means (no store lookup, or only within the lookup ceiling's
share for such networks) is the caller's decision (``fairgate.auth.guard``).

Worked example, /64 limit 60 and /48 ceiling 600: an attacker holding a /48
sprays from ten /64s, 60 failures each; after those 600 every /64 of that /48,
the 65,536th as much as the first, is over its limits for the rest of the
sliding minute. Without the aggregate, the /48 would get 65,536 × 60 attempts.

Memory is bounded: at most ``max_networks`` counters are tracked (networks and
aggregates together; an IPv6 failure takes up to three), about 200 bytes each.
A counter is forgotten only once its failures have aged out of the sliding
minute, never to make room: evicting counted networks would let an attacker
with many addresses reset his own count. While the table is full of live
counters, a network it does not hold is treated as over its limits (``blocked``
says when the oldest counter ages out), so a full table restricts newcomers
rather than releasing anyone.
"""

from __future__ import annotations

from collections import OrderedDict

from fairgate.auth.window import WINDOW, SlidingCount, window_of
from fairgate.core.clock import Clock
from fairgate.core.network import V6_TAG, network_of

__all__ = ["FailureLimiter"]

_PURGE_PER_CALL = 2
# Counter keys: one integer per (level, prefix). Networks are ``fairgate.core.network``'s
# (IPv4 < 2**32, IPv6 /64s tagged 1 << 64); aggregates are tagged above 2**128 so no two
# levels collide.
_V4_24, _V6_48, _V6_32 = (tag << 128 for tag in (2, 3, 4))

_Key = int | str


class FailureLimiter:
    """Counts failed authentications per network and aggregate; says when a network must wait.

    ``per_minute`` (≥ 0) failures are allowed per network and sliding minute;
    ``ipv4_24``, ``ipv6_48`` and ``ipv6_32`` (≥ 0) are the per-minute ceilings
    of those aggregates. 0 disables a level; all four 0 disables the limiter
    (``blocked`` is always None). ``max_networks`` (≥ 1) bounds the counters
    tracked. Time is ``clock.monotonic()``. An address that is not an IP
    address (a Unix socket peer) is its own network, keyed by its text, in no
    aggregate.
    """

    def __init__(
        self,
        per_minute: int,
        clock: Clock,
        *,
        max_networks: int = 100_000,
        ipv4_24: int = 0,
        ipv6_48: int = 0,
        ipv6_32: int = 0,
    ) -> None:
        for name, value in (
            ("per_minute", per_minute),
            ("ipv4_24", ipv4_24),
            ("ipv6_48", ipv6_48),
            ("ipv6_32", ipv6_32),
        ):
            if value < 0:
                raise ValueError(f"{name} must be 0 (disabled) or more, not {value}")
        if max_networks < 1:
            raise ValueError(f"max_networks must be at least 1, not {max_networks}")
        self._limit = per_minute
        self._v4 = ((_V4_24, 8, ipv4_24),)
        self._v6 = ((_V6_48, 16, ipv6_48), (_V6_32, 32, ipv6_32))
        self._clock = clock
        self._max = max_networks
        self._counts: OrderedDict[_Key, SlidingCount] = OrderedDict()
        self._held: dict[_Key, float] = {}  # network → held over its limits until (monotonic)

    @property
    def enabled(self) -> bool:
        return any(limit > 0 for limit in (self._limit, *(c[2] for c in (*self._v4, *self._v6))))

    @property
    def tracked(self) -> int:
        """Counters currently tracked (at most ``max_networks``)."""
        return len(self._counts)

    def blocked(self, addr: str) -> float | None:
        """Seconds until ``addr``'s network and aggregates are all below their limits,
        or None if they are now."""
        now = self._clock.monotonic()
        waits = []
        if self._held:
            until = self._held.get(network_of(addr))
            if until is not None:
                if until > now:
                    waits.append(until - now)
                else:
                    del self._held[network_of(addr)]
        for key, limit in self.levels(addr):
            count = self._counts.get(key)
            wait = self._untracked_wait(now) if count is None else count.wait(limit, now)
            if wait is not None:
                waits.append(wait)
        return max(waits) if waits else None

    def hold(self, addr: str, seconds: float) -> None:
        """Hold ``addr``'s network over its limits for ``seconds`` (the fleet's count said
        so: ``SharedFailures``), whatever this process counted itself."""
        now = self._clock.monotonic()
        if len(self._held) >= self._max:
            self._held = {k: v for k, v in self._held.items() if v > now}
            if len(self._held) >= self._max:
                return  # the shared count still refuses it at its next failure
        self._held[network_of(addr)] = now + seconds

    def failed(self, addr: str) -> None:
        """Count one failed authentication from ``addr``'s network and its aggregates."""
        now = self._clock.monotonic()
        for key, _ in self.levels(addr):
            count = self._counts.get(key)
            if count is None:
                self._purge(now)
                if len(self._counts) >= self._max:
                    continue  # full of live counters: nobody is forgotten to make room
                count = self._counts[key] = SlidingCount(window_of(now))
            else:
                self._counts.move_to_end(key)
            count.add(now)

    def levels(self, addr: str) -> list[tuple[_Key, int]]:
        """The counter keys of ``addr``'s network and aggregates, with their limits (> 0)."""
        network = network_of(addr)
        if isinstance(network, str):
            return [(network, self._limit)] if self._limit else []
        levels = [(network, self._limit)]
        if network >= V6_TAG:  # an IPv6 /64: its /48 and /32 are 16 and 32 bits up
            prefix = network ^ V6_TAG
            levels += [(tag | (prefix >> bits), limit) for tag, bits, limit in self._v6]
        else:
            levels += [(tag | (network >> bits), limit) for tag, bits, limit in self._v4]
        return [(key, limit) for key, limit in levels if limit]

    def _untracked_wait(self, now: float) -> float | None:
        """For a counter the table does not hold: None, or while the table is full of
        live counters, the seconds until its oldest counter ages out."""
        if len(self._counts) < self._max:
            return None
        oldest = next(iter(self._counts.values()))
        if oldest.stale(now):
            return None  # the next failure makes room
        return (oldest.window + 2) * WINDOW - now

    def _purge(self, now: float) -> None:
        """Forget a few counters whose failures are all older than the sliding minute."""
        for _ in range(_PURGE_PER_CALL):
            if not self._counts or not next(iter(self._counts.values())).stale(now):
                return
            self._counts.popitem(last=False)
