"""Key and team limits as the services accept them: positive integers or absent, by name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fairgate.tenancy.errors import BadRequest

__all__ = ["DEFAULT_KEYS_PER_MEMBER", "MAX_KEYS_PER_MEMBER", "KeyLimits", "check_keys_per_member"]

_MAX = 1_000_000_000

DEFAULT_KEYS_PER_MEMBER = 10
"""Live keys one user may own in a team unless the team says otherwise."""

MAX_KEYS_PER_MEMBER = 1000
"""The largest ``max_keys_per_member`` a team may set."""


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """Requests and tokens per minute, requests per day, concurrent requests; None: no limit.

    On a team they are both the defaults and the ceilings of each of its keys (and,
    as ``columns("total_")``, its totals across all its keys); on a key they may
    narrow the team's, never widen them (``above``). Each given value is an integer
    from 1 to 10⁹ (BadRequest otherwise: a key that may do nothing is revoked, not
    limited to zero).
    """

    rpm: int | None = None
    tpm: int | None = None
    rpd: int | None = None
    max_in_flight: int | None = None

    def __post_init__(self) -> None:
        for name, value in self.columns().items():
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX
            ):
                raise BadRequest(
                    f"{name} must be an integer from 1 to {_MAX}, or absent", code="invalid_limit"
                )

    def columns(self, prefix: str = "") -> Mapping[str, int | None]:
        """Column name → value; ``prefix`` "total_" names a team's totals."""
        return {
            f"{prefix}rpm": self.rpm,
            f"{prefix}tpm": self.tpm,
            f"{prefix}rpd": self.rpd,
            f"{prefix}max_in_flight": self.max_in_flight,
        }

    def above(self, ceiling: KeyLimits) -> tuple[str, int] | None:
        """The first limit set here above ``ceiling``'s (the field and the ceiling's
        value), or None when every one is within it."""
        for name, value in self.columns().items():
            bound = getattr(ceiling, name)
            if value is not None and bound is not None and value > bound:
                return name, bound
        return None


def check_keys_per_member(value: int) -> int:
    """``value`` if it is a valid ``max_keys_per_member``; BadRequest otherwise."""
    valid = isinstance(value, int) and not isinstance(value, bool)
    if not valid or not 1 <= value <= MAX_KEYS_PER_MEMBER:
        raise BadRequest(
            f"max_keys_per_member must be an integer from 1 to {MAX_KEYS_PER_MEMBER}",
            code="invalid_limit",
        )
    return value
