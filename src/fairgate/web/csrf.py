"""CSRF tokens of the forms shown before anyone is signed in (sign-up, sign-in, a claim link).

There is no session yet to hold a token's hash, so these forms use a double
submit bound to the browser: the page sets a random 256-bit value in the cookie
``__Host-fairgate-form`` (Secure, HttpOnly, SameSite=Strict, Path=/, one hour)
and writes the same value in the form; a POST is accepted only when the form's
value equals the cookie's (compared in constant time). Another site can make a
browser send the cookie but cannot read it or the page, so it cannot write the
matching field; the ``__Host-`` prefix keeps a sibling subdomain from planting
a cookie of its own. On top of this every POST is refused when the browser
marks it cross-site (``fairgate.web.origin``).

The forms of a signed-in person use the session's token instead, verified
against the hash the session holds (``fairgate.web.session``).
"""

from __future__ import annotations

import hmac
import secrets

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["FORM_COOKIE", "FormTokens"]

FORM_COOKIE = "__Host-fairgate-form"
_LIFETIME = 3600
_TOKEN_CHARS = 43  # token_urlsafe(32)


class FormTokens:
    """Issues and checks the signed-out forms' tokens (stateless)."""

    def issue(self, request: Request) -> str:
        """The browser's current token, or a new one (``attach`` then sets it)."""
        current = request.cookies.get(FORM_COOKIE)
        if current is not None and _well_formed(current):
            return current
        return secrets.token_urlsafe(32)

    def attach(self, response: Response, token: str) -> None:
        """Sets the token's cookie on the page that carries the form."""
        response.set_cookie(
            FORM_COOKIE,
            token,
            max_age=_LIFETIME,
            path="/",
            secure=True,
            httponly=True,
            samesite="strict",
        )

    def check(self, request: Request, submitted: str | None) -> bool:
        """Whether the submitted form token matches the browser's cookie."""
        cookie = request.cookies.get(FORM_COOKIE)
        if cookie is None or submitted is None or not _well_formed(cookie):
            return False
        return hmac.compare_digest(cookie.encode(), submitted.encode())


def _well_formed(token: str) -> bool:
    return len(token) == _TOKEN_CHARS and token.isascii()
