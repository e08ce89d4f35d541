"""Value types shared by the configuration schema: names, counts, durations, upstream URLs.

Scalars are strict: ``port: "8080"`` is a string, not a port, and ``true`` is
not the integer 1. Durations in a file are strings with a unit (``250ms``,
``30s``, ``5m``, ``168h``, ``7d``) parsed to float seconds; a bare number is
refused there because ``queue_ttl: 500`` could mean milliseconds as easily as
seconds. Python code building a section passes float seconds.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping
from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
)

from fairgate.core.durations import parse_duration

__all__ = [
    "FROM_FILE",
    "Count",
    "Name",
    "NonEmpty",
    "NonNegativeDuration",
    "Port",
    "PositiveDuration",
    "PublicUrl",
    "Section",
    "Size",
    "describe",
    "normalise_public_url",
    "normalise_upstream_url",
]

_MAX_SHOWN = 40

FROM_FILE = "from_file"
"""Validation-context flag set by the loader: durations must then be strings with a unit."""


class Section(BaseModel):
    """Base of every configuration model: frozen, unknown keys refused, numbers finite.

    Python code may build sections by field name (``Model(model_class=...)``);
    the loader accepts only the YAML key names (``class``).
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
        validate_by_name=True,
        validate_by_alias=True,
        use_attribute_docstrings=True,
    )


def describe(value: object) -> str:
    """A short, YAML-like rendering of a value for a message (strings cut at 40 characters)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    text = str(value)
    if len(text) > _MAX_SHOWN:
        text = text[: _MAX_SHOWN - 1] + "…"
    return "'" + text.replace("'", "''") + "'"


def _name(value: str) -> str:
    if not value:
        raise ValueError("must not be empty")
    if value != value.strip():
        raise ValueError(f"must not start or end with whitespace, got {describe(value)}")
    if any(unicodedata.category(ch).startswith("C") for ch in value):
        raise ValueError("must not contain control characters")
    return value


def _duration(value: object, info: ValidationInfo, *, allow_zero: bool) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and not _from_file(info):
        seconds = float(value)  # Python callers pass seconds
    elif isinstance(value, str):
        seconds = parse_duration(value)
    else:
        raise ValueError(f"expected a duration such as 30s, 5m or 168h, got {describe(value)}")
    if not math.isfinite(seconds):
        raise ValueError(f"duration is too large: {describe(value)}")
    if seconds < 0:
        raise ValueError(f"must not be negative, got {describe(value)}")
    if seconds == 0 and not allow_zero:
        raise ValueError(f"must be longer than 0s, got {describe(value)}")
    return seconds


def _from_file(info: ValidationInfo) -> bool:
    return isinstance(info.context, Mapping) and bool(info.context.get(FROM_FILE))


def _positive_duration(value: object, info: ValidationInfo) -> float:
    return _duration(value, info, allow_zero=False)


def _non_negative_duration(value: object, info: ValidationInfo) -> float:
    return _duration(value, info, allow_zero=True)


def normalise_upstream_url(value: str) -> str:
    """``value`` with a lower-case scheme and host and no trailing slash, or ``ValueError``.

    Only ``http`` and ``https`` with a host; no credentials (they would be sent
    to the engine and end up in logs), no query and no fragment (the gateway
    appends the request path).
    """
    return _http_url(
        value,
        "upstream URL",
        credentials="upstream URL must not contain credentials: use key_file for the key",
        query="must not have a query string",
        fragment="must not have a fragment",
    )


def normalise_public_url(value: str) -> str:
    """``value`` with a lower-case scheme and host and no trailing slash, or ``ValueError``.

    The address people open the gateway at (claim links are ``{public_url}/claim/…``):
    ``http`` or ``https`` with a host, optionally a path (a reverse proxy's prefix); no
    credentials, query or fragment, which would end up in every link.
    """
    either = "must not have a query or fragment"
    return _http_url(
        value,
        "public_url",
        credentials="public_url must not contain credentials",
        query=either,
        fragment=either,
    )


def _http_url(value: str, what: str, *, credentials: str, query: str, fragment: str) -> str:
    """The checks both URLs share; ``what`` names the field in each message."""
    parts = urlsplit(value.strip())
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"{what} must start with http:// or https://, got {describe(value)}")
    if "@" in parts.netloc:
        raise ValueError(credentials)
    if not parts.hostname:
        raise ValueError(f"{what} has no host: {describe(value)}")
    try:
        parts.port  # noqa: B018 - reading it validates it
    except ValueError:
        raise ValueError(f"{what} has an invalid port: {describe(value)}") from None
    if parts.query or "?" in value:
        raise ValueError(f"{what} {query}: {describe(value)}")
    if parts.fragment or "#" in value:
        raise ValueError(f"{what} {fragment}: {describe(value)}")
    return urlunsplit((scheme, parts.netloc.lower(), parts.path.rstrip("/"), "", ""))


def _non_empty(value: tuple[object, ...]) -> tuple[object, ...]:
    # An AfterValidator rather than min_length: pydantic counts only the valid
    # items for min_length, so one bad entry would also report "too short".
    if not value:
        raise ValueError("needs at least one entry")
    return value


NonEmpty = AfterValidator(_non_empty)
"""Annotation for a list that must have at least one entry."""

Name = Annotated[StrictStr, AfterValidator(_name)]
"""A non-empty name without surrounding whitespace or control characters."""

PositiveDuration = Annotated[StrictFloat, BeforeValidator(_positive_duration)]
"""A duration string, > 0, as float seconds."""

NonNegativeDuration = Annotated[StrictFloat, BeforeValidator(_non_negative_duration)]
"""A duration string, >= 0 (``0s`` allowed), as float seconds."""

PublicUrl = Annotated[StrictStr, AfterValidator(normalise_public_url)]
"""An http(s) base URL people open (no credentials, query or fragment; no trailing slash)."""

Port = Annotated[StrictInt, Field(ge=0, le=65535)]
"""A TCP port; 0 lets the operating system choose one."""

Size = Annotated[StrictInt, Field(ge=1)]
"""A size in bytes, at least 1."""

Count = Annotated[StrictInt, Field(ge=1)]
"""A count, at least 1."""
