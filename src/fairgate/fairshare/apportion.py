"""Reservations: a pool's capacity apportioned over organisation shares (Hamilton's method).

Largest-remainder apportionment. Each organisation's quota is ``share × C``; it
first gets the whole part of its quota, then the seats left up to
``floor(Σ share × C)`` go one each to the largest fractional parts, ties broken
by name (ascending), so the result never depends on the order of a mapping.

    apportion(256, {"A": 0.8125, "B": 0.1875}) == {"A": 208, "B": 48}
    apportion(10,  {"A": 0.8125, "B": 0.1875}) == {"A": 8, "B": 2}     # 8.125 / 1.875
    apportion(10,  {"A": 0.5})                 == {"A": 5}              # 5 seats unreserved

Guarantees: the reservations sum to exactly ``floor(Σ share × C)`` (so never
above C), and each lies within one seat of its quota (the quota rule). Hamilton
is not house-monotone in general (the Alabama paradox: an organisation can lose
a seat when C grows); it is for two organisations whose shares sum to 1, where
it reduces to rounding each quota to the nearest integer.

Arithmetic is exact: each share is read as the decimal it was written as
(``0.29`` is 29/100, not the binary float just below it), and a quota within
``1e-9`` of a whole number counts as that number, so shares of one third each
still reserve the whole pool.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

__all__ = ["apportion"]

# Slack for shares written as binary floats (three shares of 0.3333333333333333).
_TOLERANCE = Fraction(1, 10**9)


def apportion(capacity: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Integer reservations per organisation for a pool of ``capacity`` concurrent requests.

    ``shares`` are fractions in [0, 1] summing to at most 1; a sum below 1 leaves
    the rest of the pool unreserved. Raises ``ValueError`` for a negative
    capacity, a share outside [0, 1] or not finite, or shares summing above 1.
    """
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
        raise ValueError(f"capacity must be a non-negative integer, got {capacity!r}")
    exact = {org: _exact_share(org, share) for org, share in shares.items()}
    total_share = sum(exact.values(), Fraction(0))
    if total_share > 1 + _TOLERANCE:
        raise ValueError(f"shares sum to {float(total_share):.6g}, more than 1")

    quotas = {org: share * capacity for org, share in exact.items()}
    seats = {org: math.floor(quota + _TOLERANCE) for org, quota in quotas.items()}
    target = min(capacity, math.floor(sum(quotas.values(), Fraction(0)) + _TOLERANCE))
    left = target - sum(seats.values())
    # Largest remainder first; equal remainders go to the alphabetically first name.
    by_remainder = sorted(quotas, key=lambda org: (-(quotas[org] - seats[org]), org))
    for org in by_remainder[: max(0, left)]:
        seats[org] += 1
    return seats


def _exact_share(org: str, share: float) -> Fraction:
    if isinstance(share, bool) or not isinstance(share, int | float):
        raise ValueError(f"share of {org!r} must be a number, got {share!r}")
    if not math.isfinite(share) or share < 0 or share > 1:
        raise ValueError(f"share of {org!r} must be in [0, 1], got {share!r}")
    # repr() is the shortest decimal that round-trips: the number as it was written.
    return Fraction(repr(float(share)))
