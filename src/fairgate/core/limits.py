"""A key's rate limits, bounded by its team's: the one rule of "key against team".

The one spelling of requests and tokens per minute, requests per day and requests in
flight on the request path: a key's own limits and its team's totals are each one
``Limits``, built once when the key is loaded (``Principal.limits``,
``Principal.team_limits``) and read as they are by the limit stage.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_LIMITS", "Limits"]


@dataclass(frozen=True, slots=True)
class Limits:
    """A key's rate limits; None means unlimited.

    ``rpm`` requests and ``tpm`` tokens per sliding minute, ``rpd`` requests per
    calendar day (in the limiter's zone), ``max_in_flight`` concurrent requests.
    Every value given is a positive integer (``ValueError`` otherwise; a key that
    may do nothing is revoked, not limited to zero).
    """

    rpm: int | None = None
    tpm: int | None = None
    rpd: int | None = None
    max_in_flight: int | None = None

    def __post_init__(self) -> None:
        for name in ("rpm", "tpm", "rpd", "max_in_flight"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer or absent, not {value}")

    def within(self, ceiling: Limits) -> Limits:
        """These limits bounded by ``ceiling`` (the team's per-key limits): for each
        field the smaller of the two, the one that is set when only one is, None when
        neither is. A key can narrow its team's limits, never widen them."""
        return Limits(
            rpm=_smaller(self.rpm, ceiling.rpm),
            tpm=_smaller(self.tpm, ceiling.tpm),
            rpd=_smaller(self.rpd, ceiling.rpd),
            max_in_flight=_smaller(self.max_in_flight, ceiling.max_in_flight),
        )


NO_LIMITS = Limits()
"""Nothing limited: the limits of a key or team that sets none."""


def _smaller(own: int | None, ceiling: int | None) -> int | None:
    if own is None:
        return ceiling
    return own if ceiling is None else min(own, ceiling)
