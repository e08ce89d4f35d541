"""A key's rate limits, bounded by its team's: the one rule of "key against team".

The one key-limits type: requests and tokens per minute, requests per day and
requests in flight, as the request path reads them (a key's own limits and its
team's totals are each one ``Limits``, built once when the key is loaded:
``Principal.limits``, ``Principal.team_limits``) and as the services and the admin
API take them (a team's per-key limits and totals, a key's own; ``columns`` names
their store columns, ``above`` checks a key against its team).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fairgate.core.errors import BadRequest

__all__ = ["MAX_LIMIT", "NO_LIMITS", "Limits"]

MAX_LIMIT = 1_000_000_000
"""The largest value any limit may take."""

_FIELDS = ("rpm", "tpm", "rpd", "max_in_flight")


@dataclass(frozen=True, slots=True)
class Limits:
    """A key's rate limits; None means unlimited.

    ``rpm`` requests and ``tpm`` tokens per sliding minute, ``rpd`` requests per
    calendar day (in the limiter's zone), ``max_in_flight`` concurrent requests.
    Every value given is an integer from 1 to ``MAX_LIMIT`` (``BadRequest``, code
    ``invalid_limit``, otherwise: a key that may do nothing is revoked, not limited
    to zero).

    On a team they are both the defaults and the ceilings of each of its keys (and,
    as ``columns("total_")``, its totals across all its keys); on a key they may
    narrow the team's, never widen them (``above``, ``within``).
    """

    rpm: int | None = None
    tpm: int | None = None
    rpd: int | None = None
    max_in_flight: int | None = None

    def __post_init__(self) -> None:
        for name in _FIELDS:
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT
            ):
                raise BadRequest(
                    f"{name} must be an integer from 1 to {MAX_LIMIT}, or absent",
                    code="invalid_limit",
                )

    def columns(self, prefix: str = "") -> Mapping[str, int | None]:
        """Column name → value; ``prefix`` "total_" names a team's totals."""
        return {
            f"{prefix}rpm": self.rpm,
            f"{prefix}tpm": self.tpm,
            f"{prefix}rpd": self.rpd,
            f"{prefix}max_in_flight": self.max_in_flight,
        }

    def above(self, ceiling: Limits) -> tuple[str, int] | None:
        """The first limit set here above ``ceiling``'s (the field and the ceiling's
        value), or None when every one is within it."""
        for name in _FIELDS:
            value, bound = getattr(self, name), getattr(ceiling, name)
            if value is not None and bound is not None and value > bound:
                return name, bound
        return None

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
