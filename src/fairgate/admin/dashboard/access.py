"""Who reads the dashboard: the admin API's bearer credential, resolved on every request.

    access = Access(authenticator)
    caller = await access.caller(request)     # DashboardCaller, or None: no credential

``Authorization: Bearer <master key | fga-…>`` is checked exactly as the admin
API checks it (``AdminAuthenticator``: the same failure counting, 401 and 429,
audit events). A request without an Authorization header is ``None``: the
page sends a browser to the sign-in form.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from fairgate.admin.authn import AdminAuthenticator
from fairgate.core.errors import Unauthorized
from fairgate.tenancy import Actor

__all__ = ["Access", "DashboardCaller"]


@dataclass(frozen=True, slots=True)
class DashboardCaller:
    """The actor of one dashboard request; ``csrf`` is the sign-out form's token (a web
    session's), None for a bearer credential."""

    actor: Actor
    csrf: str | None = None


def remote_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"


class Access:
    """Resolves a dashboard request to its caller (see the module docstring)."""

    def __init__(self, authenticator: AdminAuthenticator) -> None:
        self._authenticator = authenticator

    @property
    def sign_in_enabled(self) -> bool:
        return False

    def unauthenticated(self) -> Unauthorized:
        return Unauthorized("sign in first", code="invalid_admin_credential")

    async def caller(self, request: Request) -> DashboardCaller | None:
        """The caller, None without any credential; raises what the authenticator raises."""
        header = request.headers.get("authorization")
        if header is None:
            return None
        scheme, _, secret = header.partition(" ")
        presented = secret.strip() if scheme.lower() == "bearer" and secret.strip() else None
        actor = await self._authenticator.authenticate(presented, remote_of(request))
        return DashboardCaller(actor)
