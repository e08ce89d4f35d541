"""ULIDs for keys and admin tokens: 48 bits of milliseconds, 80 random bits, 26 characters.

They sort by creation time (listings read naturally, indexes stay compact) and
cannot be guessed from a neighbour, unlike a counter. Scope checks do not rely
on that: every write is filtered by the actor's scope in SQL anyway.
"""

from __future__ import annotations

import secrets
import time

__all__ = ["new_ulid"]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_ulid(now: float | None = None) -> str:
    """A new ULID for the moment ``now`` (Unix seconds; the system clock when None)."""
    millis = int((time.time() if now is None else now) * 1000) & ((1 << 48) - 1)
    value = (millis << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))
