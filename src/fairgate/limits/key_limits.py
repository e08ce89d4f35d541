"""A key's rate limits, with its team's defaults filling the gaps."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


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

    def with_defaults(self, defaults: Limits) -> Limits:
        """Each limit from this key where it sets one, otherwise the team's default."""
        return Limits(
            rpm=self.rpm if self.rpm is not None else defaults.rpm,
            tpm=self.tpm if self.tpm is not None else defaults.tpm,
            rpd=self.rpd if self.rpd is not None else defaults.rpd,
            max_in_flight=(
                self.max_in_flight if self.max_in_flight is not None else defaults.max_in_flight
            ),
        )
