"""The lookup ceiling: store lookups of credentials not known to be valid, per minute.

Per-network limits cannot bound the store's load on their own: a spray from
very many networks (a botnet, or the 4 billion /64s of one IPv6 /32) is within
every network's limit. The ceiling is one sliding minute
(``fairgate.auth.window``) per listener and process: each lookup of a
credential the process does not know to be valid takes a slot before it asks
the store; a lookup that finds a valid credential, or that the store could not
answer, gives its slot back. So the ceiling counts the lookups of unknown
credentials, and legitimate traffic never uses it up.

Networks over their failure limits (``restricted``) may take a slot only while
less than half of the ceiling is used, so one network or aggregate that keeps
failing leaves the other half to everyone else.

Worked example, ``per_minute`` = 6000: a spray from one blocked network gets
3000 lookups a minute at most; clean networks can still look up 3000 unknown
keys more; past 6000 nobody may look up an unknown credential until the sliding
minute frees slots. Lookups of credentials known valid never take a slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairgate.auth.window import SlidingCount, window_of
from fairgate.core.clock import Clock

__all__ = ["LookupCeiling", "Slot"]


@dataclass(frozen=True, slots=True)
class Slot:
    """One lookup counted against the ceiling, in the aligned window it was taken in."""

    window: int


class LookupCeiling:
    """At most ``per_minute`` (≥ 0; 0: no ceiling) lookups of unknown credentials per
    sliding minute; half of that for restricted networks. Time is ``clock.monotonic()``."""

    def __init__(self, per_minute: int, clock: Clock) -> None:
        if per_minute < 0:
            raise ValueError(f"per_minute must be 0 (no ceiling) or more, not {per_minute}")
        self._limit = per_minute
        self._clock = clock
        self._count = SlidingCount(window_of(clock.monotonic()))

    def take(self, *, restricted: bool) -> Slot | float:
        """A slot for one lookup, or the seconds until one may be taken."""
        now = self._clock.monotonic()
        if self._limit:
            limit = max(1, self._limit // 2) if restricted else self._limit
            wait = self._count.wait(limit, now)
            if wait is not None:
                return wait
        self._count.add(now)
        return Slot(window_of(now))

    def give_back(self, slot: Slot) -> None:
        """Uncount ``slot``'s lookup: it found a valid credential, or the store did not answer."""
        self._count.remove(slot.window)
