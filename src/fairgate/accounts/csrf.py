"""CSRF tokens: derived from the session's cookie value, checked against a stored hash.

    token = csrf_token(cookie_value)       # put in every state-changing form
    stored = digest(token)                 # what the session row keeps
    matches(stored, submitted)             # constant time; False for a missing token

The token is HMAC-SHA-256(cookie value, "fairgate csrf"), so a page can render
it again on every request without the store holding it in the clear, and a
page from another origin (which cannot read the HttpOnly cookie) cannot compute
it. Only its SHA-256 is stored. The Origin / Sec-Fetch-Site refusal is the web
layer's, in front of this check.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["csrf_token", "digest", "matches"]

_LABEL = b"fairgate csrf v1"
_MAX_TOKEN = 128


def csrf_token(cookie_value: str) -> str:
    """The CSRF token of the session whose cookie holds ``cookie_value`` (64 hex digits)."""
    return hmac.new(cookie_value.encode(), _LABEL, hashlib.sha256).hexdigest()


def digest(token: str) -> bytes:
    """The SHA-256 of a token (a session id or a CSRF token), as stored."""
    return hashlib.sha256(token.encode()).digest()


def matches(stored: bytes, submitted: str | None) -> bool:
    """Whether ``submitted`` is the token whose digest is ``stored`` (constant time)."""
    if not submitted or len(submitted) > _MAX_TOKEN:
        return False
    return hmac.compare_digest(digest(submitted), stored)
