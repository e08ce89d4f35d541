"""What the services bound about keys and teams: the keys one member may own in a team.

The limits themselves are ``fairgate.core.limits.Limits`` (re-exported here), the one
key-limits type of the request path, the services and the admin API.
"""

from __future__ import annotations

from fairgate.core.limits import Limits
from fairgate.tenancy.errors import BadRequest

__all__ = ["DEFAULT_KEYS_PER_MEMBER", "MAX_KEYS_PER_MEMBER", "Limits", "check_keys_per_member"]

DEFAULT_KEYS_PER_MEMBER = 10
"""Live keys one user may own in a team unless the team says otherwise."""

MAX_KEYS_PER_MEMBER = 1000
"""The largest ``max_keys_per_member`` a team may set."""


def check_keys_per_member(value: int) -> int:
    """``value`` if it is a valid ``max_keys_per_member``; BadRequest otherwise."""
    valid = isinstance(value, int) and not isinstance(value, bool)
    if not valid or not 1 <= value <= MAX_KEYS_PER_MEMBER:
        raise BadRequest(
            f"max_keys_per_member must be an integer from 1 to {MAX_KEYS_PER_MEMBER}",
            code="invalid_limit",
        )
    return value
