"""The session cookie: ``__Host-fairgate-session``, always Secure, HttpOnly, SameSite=Lax, Path=/.

Secure is set whatever scheme the listener sees: behind a TLS-terminating
reverse proxy the gateway speaks plain HTTP while the browser speaks HTTPS,
and the ``__Host-`` prefix makes the browser refuse the cookie without it.
(Browsers also keep Secure cookies from ``http://localhost``, for local use.)
The cookie lasts until the session's absolute timeout; the idle timeout is the
store's to enforce.
"""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.responses import Response

from fairgate.accounts import COOKIE, OpenedSession

__all__ = ["clear_session_cookie", "set_session_cookie", "utc_now"]


def set_session_cookie(response: Response, opened: OpenedSession, now: datetime) -> None:
    """Gives the browser the new session's cookie."""
    lifetime = max(0, int((opened.expires_at - now).total_seconds()))
    response.set_cookie(
        COOKIE,
        opened.cookie_value,
        max_age=lifetime,
        path="/",
        secure=True,
        httponly=True,
        samesite="lax",
    )


def clear_session_cookie(response: Response) -> None:
    """Tells the browser to drop the session cookie (the session itself is closed apart)."""
    response.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="lax")


def utc_now(wall: float) -> datetime:
    """A wall-clock reading as an aware UTC datetime."""
    return datetime.fromtimestamp(wall, UTC)
