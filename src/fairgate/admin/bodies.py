"""Request bodies of the admin API: strict, unknown fields refused (400), durations as strings.

Durations are written like the configuration's (``"30d"``, ``"24h"``) and
parsed by ``fairgate.core.durations``; limits are positive integers or null.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from fairgate.core.durations import parse_duration
from fairgate.core.errors import BadRequest
from fairgate.tenancy import Limits
from fairgate.tenancy.limits import DEFAULT_KEYS_PER_MEMBER, MAX_KEYS_PER_MEMBER

__all__ = [
    "GrantBody",
    "KeyBody",
    "KeyChange",
    "NameBody",
    "ProjectBody",
    "RotateBody",
    "TeamBody",
    "TeamChange",
    "TokenBody",
    "UserBody",
    "seconds",
]

Name = Annotated[StrictStr, Field(min_length=1, max_length=128)]
Limit = Annotated[StrictInt, Field(ge=1, le=1_000_000_000)] | None
Models = Annotated[list[Annotated[StrictStr, Field(max_length=256)]], Field(max_length=256)] | None
Duration = Annotated[StrictStr, Field(max_length=32, examples=["30d", "24h"])]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Limits(_Body):
    rpm: Limit = None
    tpm: Limit = None
    rpd: Limit = None
    max_in_flight: Limit = None

    def limits(self) -> Limits:
        return Limits(rpm=self.rpm, tpm=self.tpm, rpd=self.rpd, max_in_flight=self.max_in_flight)


class NameBody(_Body):
    """``{"name"}``: a new organisation."""

    name: Name


class _TeamLimits(_Limits):
    """A team's per-key limits (``rpm`` …), its totals across all its keys
    (``total_rpm`` …) and the live keys one member may own in it."""

    total_rpm: Limit = None
    total_tpm: Limit = None
    total_rpd: Limit = None
    total_max_in_flight: Limit = None
    max_keys_per_member: Annotated[StrictInt, Field(ge=1, le=MAX_KEYS_PER_MEMBER)] = (
        DEFAULT_KEYS_PER_MEMBER
    )

    def totals(self) -> Limits:
        return Limits(
            rpm=self.total_rpm,
            tpm=self.total_tpm,
            rpd=self.total_rpd,
            max_in_flight=self.total_max_in_flight,
        )


class TeamBody(_TeamLimits):
    """A new team under ``org``; ``models`` null = every model, [] = none."""

    org: Name
    name: Name
    models: Models = None


class TeamChange(_TeamLimits):
    """Fields to change on a team; a field left out stays as it is."""

    models: Models = None


class ProjectBody(_Body):
    name: Name


class KeyBody(_Limits):
    """A new key; ``expires_in`` a duration from now (``"90d"``), null = never.

    ``claim: true`` answers with a one-time link (``claim_url``) instead of the secret,
    redeemable for ``claim_expires_in`` (default ``"72h"``, at most ``"30d"``); it needs
    ``public_url`` in the configuration. ``claim_expires_in`` without ``claim`` is refused.
    """

    team: Name
    project: Name | None = None
    name: Name | None = None
    models: Models = None
    tags: Annotated[list[Name], Field(max_length=8)] = []
    expires_in: Duration | None = None
    claim: StrictBool = False
    claim_expires_in: Duration | None = None

    @model_validator(mode="after")
    def _claim_lifetime_needs_a_claim(self) -> KeyBody:
        if self.claim_expires_in is not None and not self.claim:
            raise ValueError("claim_expires_in goes with claim: true")
        return self


class KeyChange(_Limits):
    """Fields to change on a live key; a field left out stays as it is."""

    models: Models = None
    tags: Annotated[list[Name], Field(max_length=8)] = []
    expires_in: Duration | None = None


class RotateBody(_Body):
    """``grace_period``: how long the replaced secret keeps working (``"24h"``, at most 720h)."""

    grace_period: Duration = "0s"


class UserBody(_Body):
    name: Name
    org: Name | None = None


class GrantBody(_Body):
    """A role on the root (no org, no team), an organisation or a team."""

    role: Name
    org: Name | None = None
    team: Name | None = None


class TokenBody(_Body):
    """An admin token for ``user`` (default: the caller), valid ``expires_in`` (null = no end)."""

    user: Name | None = None
    name: Name | None = None
    expires_in: Duration | None = None


def seconds(field: str, text: str | None) -> float | None:
    """A duration field in seconds; BadRequest naming the field when it does not parse."""
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise BadRequest(f"{field}: {exc}", code="invalid_duration") from None
