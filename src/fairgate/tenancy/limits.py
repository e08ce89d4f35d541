"""Key limits as the services accept them: positive integers or absent, by name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fairgate.tenancy.errors import BadRequest

__all__ = ["KeyLimits"]

_MAX = 1_000_000_000


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """Requests and tokens per minute, requests per day, concurrent requests; None: no limit.

    On a team these are the defaults of its keys; on a key they win over the team's.
    Each given value is an integer from 1 to 10⁹ (BadRequest otherwise: a key that
    may do nothing is revoked, not limited to zero).
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

    def columns(self) -> Mapping[str, int | None]:
        return {
            "rpm": self.rpm,
            "tpm": self.tpm,
            "rpd": self.rpd,
            "max_in_flight": self.max_in_flight,
        }
