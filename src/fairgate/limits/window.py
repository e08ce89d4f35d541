"""Sliding windows as bucketed logs: the arithmetic both back ends share.

A window of length ``T`` is cut into ``G`` granules of ``g = T / G`` seconds; the
bucket of time ``t`` is ``floor(t / g)``. A check at time ``t`` counts the buckets
``floor(t/g) - G .. floor(t/g)``, i.e. everything charged in ``[t - T - g, t]``, and
admits a weight ``w`` when ``counted + w <= limit``.

Guarantee (for weights that are never corrected downwards, e.g. RPM): the weight
admitted within ANY interval ``(a, a + T]`` never exceeds ``limit``. Proof: let
``t_k`` be the last admission inside the interval. At ``t_k`` the counted buckets
cover ``[t_k - T - g, t_k] ⊇ (t_k - T, t_k] ⊇ (a, t_k]`` because ``a >= t_k - T``,
so every earlier admission of the interval was counted, and the check admitted
``t_k`` only if that count plus its own weight stayed within the limit.

The price of the bucket is caution, never excess: a weight is counted up to one
granule longer than ``T``, so a refusal can come at most ``g`` (1 s for a minute
window with the default 60 granules) earlier than an exact log would give it.
Memory is ``O(G)`` per counter, whatever the rate.

GCRA with burst = limit was rejected because it is not a window bound: a full
burst at ``t = 0`` followed by the steady drip of the refilling bucket passes
``2 * limit - 1`` requests inside one ``T``.

    w = SlidingWindow(length=60, granules=60)
    w.add(w.bucket(59.5), 10)         # a burst of 10 at t = 59.5 s
    w.usage(60.5) == 10               # still counted one second later
    w.retry_after(1, 10, 60.5) == 59.5   # its bucket leaves the count at t = 120
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["DEFAULT_GRANULES", "SlidingWindow", "bucket_of"]

DEFAULT_GRANULES = 60

# bounds of an empty window: every check counts it in full (zero) on the fast path
_NONE_LOW = 2**62
_NONE_HIGH = -(2**62)


def bucket_of(now: float, window: float, granules: int) -> int:
    """Index of the bucket holding time ``now`` (seconds) for a window cut into ``granules``."""
    return math.floor(now / (window / granules))


@dataclass(slots=True)
class SlidingWindow:
    """The buckets of one window counter: bucket index → charged weight (non-negative).

    ``length`` is the window in seconds (> 0), cut into ``granules`` (>= 1) buckets.
    ``total`` is the sum of all buckets held and ``low``/``high`` bound their
    indexes, so that ``usage`` is O(1) while every bucket held is countable (the
    usual case once ``prune`` has run) and a sum over at most ``granules + 1``
    buckets otherwise.
    """

    length: float = 60.0
    granules: int = DEFAULT_GRANULES
    buckets: dict[int, int] = field(default_factory=dict)
    total: int = 0
    low: int = _NONE_LOW
    high: int = _NONE_HIGH

    def bucket(self, now: float) -> int:
        """Index of the bucket holding ``now``."""
        return bucket_of(now, self.length, self.granules)

    def prune(self, now: float) -> None:
        """Drop the buckets that no check at ``now`` or later can count again."""
        self.prune_at(self.bucket(now))

    def prune_at(self, current: int) -> None:
        """``prune`` for the time whose bucket is ``current`` (a caller charging several
        windows of one shape computes the bucket once)."""
        lowest = current - self.granules
        if self.low >= lowest:
            return
        self.buckets = {b: v for b, v in self.buckets.items() if b >= lowest}
        self.total = sum(self.buckets.values())
        self.low = min(self.buckets, default=_NONE_LOW)
        self.high = max(self.buckets, default=_NONE_HIGH)

    def counted(self, current: int) -> int:
        """``prune_at(current)``, then ``usage_at(current)``: the check of an acquisition,
        in one call."""
        lowest = current - self.granules
        if self.low < lowest:
            self.prune_at(current)
        if self.high <= current:  # every bucket held is countable: low >= lowest now
            return self.total
        return sum(v for b, v in self.buckets.items() if lowest <= b <= current)

    def usage(self, now: float) -> int:
        """Weight counted by a check at ``now``."""
        return self.usage_at(self.bucket(now))

    def usage_at(self, current: int) -> int:
        """``usage`` for the time whose bucket is ``current``."""
        lowest = current - self.granules
        if self.low >= lowest and self.high <= current:
            return self.total
        return sum(v for b, v in self.buckets.items() if lowest <= b <= current)

    def retry_after(self, weight: int, limit: int, now: float) -> float:
        """Seconds until a check would admit ``weight`` if nothing else were charged;
        0 if it fits now, ``length`` when ``weight`` alone exceeds ``limit``."""
        current = self.bucket(now)
        lowest = current - self.granules
        live = sorted((b, v) for b, v in self.buckets.items() if lowest <= b <= current)
        excess = sum(v for _, v in live) + weight - limit
        if excess <= 0:
            return 0.0
        granule = self.length / self.granules
        for index, value in live:
            excess -= value
            if excess <= 0:
                # bucket ``index`` leaves the count once floor(t/g) - G > index
                return max(0.0, (index + self.granules + 1) * granule - now)
        return self.length

    def add(self, bucket: int, weight: int) -> int:
        """Add ``weight`` (negative refunds) to ``bucket``, never below zero; the new value."""
        before = self.buckets.get(bucket, 0)
        value = before + weight
        if value < 0:
            value = 0
        self.total += value - before
        if value:
            self.buckets[bucket] = value
            # comparisons, not min/max: this runs for every window of every request
            if bucket < self.low:
                self.low = bucket
            if bucket > self.high:
                self.high = bucket
        else:
            # low/high may now be wider than the buckets held: only the fast path is lost
            self.buckets.pop(bucket, None)
        return value
