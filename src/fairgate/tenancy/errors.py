"""What the tenancy services raise; the admin API renders each as the OpenAI error envelope.

    GatewayError (fairgate.core.errors)
    ├── BadRequest     400  invalid name, limit, duration, model; declared in the configuration
    ├── Forbidden      403  the target is visible to the actor, the change is not theirs to make
    ├── NotFound       404  no such target, or one the actor may not see (the two look alike)
    └── Conflict       409  the name is taken (or reserved by the configuration), the binding
        │                   exists
        └── ConfigConflict  the configuration declares a team the store holds under another
                            organisation (raised by the start-up sync: the start-up stops)
    StoreUnavailable        the database did not answer (503 in the admin API)

Choosing 404 over 403 for what the actor cannot see keeps a guessed id or name
from confirming that it exists in another tenant. A user outside the actor's
scope gets :func:`no_user`, which does not echo the name, so two different
names (one existing elsewhere, one never created) get the same bytes.
"""

from __future__ import annotations

from fairgate.core.errors import BadRequest, Forbidden, GatewayError, NotFound, StoreUnavailable

__all__ = [
    "BadRequest",
    "ConfigConflict",
    "Conflict",
    "Forbidden",
    "NotFound",
    "StoreUnavailable",
    "no_user",
]


class Conflict(GatewayError):
    """The name is already taken or the binding already exists: nothing was changed."""

    status = 409
    type = "invalid_request_error"


class ConfigConflict(Conflict):
    """The configuration cannot be synced into the store as it stands: nothing was changed.

    Raised by the start-up sync (``Orgs.sync``); ``fairgate serve`` and every
    command that opens the store stop with the message, which tells the operator
    what to change.
    """


def no_user() -> NotFound:
    """The answer for a user name that does not exist or lies outside the actor's scope."""
    return NotFound("no such user", code="user_not_found")
