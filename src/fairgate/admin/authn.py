"""Who calls the admin API: the master key or a user's admin token, or 401.

    Authorization: Bearer <master key>    proxy_admin at the root
    Authorization: Bearer fga-…           the token's user with their current role bindings

The master key is compared first, as SHA-256 digests in constant time, so
neither its length nor its content leaks through timing, and no failure count
stands in its way: a spray, on this listener or the client one, never locks the
operator out. Admin tokens are resolved in the store on every request (no cache:
a revoked token or removed role applies at once); the lookup is admitted by the
admin listener's own guard (``fairgate.auth.AuthGuard``), so a valid token is
served whatever its network's failure count while the lookup ceiling allows.
Each refused credential (missing, malformed, unknown, revoked, expired) is one
failure in the admin listener's limiter and, while the network is within its
limits, one 401 with the same body and one audit event ``auth.failed``; past
them it is a 429 and is not audited (a spray must not fill the audit log).
"""

from __future__ import annotations

import hashlib

from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import Request

from fairgate.auth import AuthGuard, Refusal
from fairgate.auth.secrets import ADMIN_TOKEN_PREFIX, constant_time_equal, looks_like_key, sha256
from fairgate.core.errors import RateLimited, StoreUnavailable, Unauthorized
from fairgate.tenancy import Actor, Tenancy

__all__ = ["AdminAuthenticator"]


bearer = HTTPBearer(auto_error=False, description="The master key or an admin token (fga-…)")


class AdminAuthenticator:
    """Resolves the caller of an admin request to an :class:`Actor` (a FastAPI dependency).

    ``master_key_sha256`` None disables the master key (only admin tokens work).
    ``guard`` is the admin listener's own (never the client listener's).
    Raises RateLimited (429) when the guard refuses a token lookup or a network
    over its limits presents a refused credential, Unauthorized (401) for any
    other refused credential, StoreUnavailable when a token cannot be looked up.
    """

    def __init__(
        self, tenancy: Tenancy, *, master_key_sha256: bytes | None, guard: AuthGuard
    ) -> None:
        self._tenancy = tenancy
        self._master = master_key_sha256
        self._guard = guard

    def set_master_key_sha256(self, digest: bytes) -> None:
        """Accept the master key with this SHA-256 from now on (a key rotated in a vault)."""
        self._master = digest

    @property
    def master_key_enabled(self) -> bool:
        """True while a master key is accepted."""
        return self._master is not None

    def master_key_mark(self) -> str | None:
        """A short mark of the master key accepted now (None without one), neither the key
        nor its digest: an admin session opened with the master key records it, so a
        rotated key ends those sessions at once."""
        if self._master is None:
            return None
        return hashlib.sha256(b"fairgate master-key session\0" + self._master).hexdigest()[:24]

    async def __call__(
        self, request: Request, credentials: HTTPAuthorizationCredentials | None
    ) -> Actor:
        remote = request.client.host if request.client else "unknown"
        secret = credentials.credentials if credentials is not None else None
        return await self.authenticate(secret, remote)

    async def authenticate(self, secret: str | None, remote: str) -> Actor:
        """The actor behind ``secret`` (a bearer's, or the dashboard's sign-in form's),
        refused and counted as the module docstring says."""
        if secret is None:
            return await self._refuse(remote, "no bearer credential", looked_up=False)
        if self._master is not None and constant_time_equal(sha256(secret), self._master):
            return Actor.master_key(remote)
        if looks_like_key(secret, prefix=ADMIN_TOKEN_PREFIX):
            return await self._token(secret, remote)
        return await self._refuse(remote, "not the master key nor an admin token", looked_up=False)

    async def _token(self, secret: str, remote: str) -> Actor:
        """The token's actor, looked up when the guard admits it."""
        slot = self._guard.admit(remote)
        if isinstance(slot, Refusal):
            raise _too_many(slot.retry_after)
        try:
            actor = await self._tenancy.admin_tokens.authenticate(secret, remote=remote)
        except StoreUnavailable:
            self._guard.unavailable(slot)
            raise
        except BaseException:
            self._guard.abandoned(slot)
            raise
        if actor is None:
            return await self._refuse(
                remote, "unknown, revoked or expired admin token", looked_up=True
            )
        self._guard.valid(slot)
        return actor

    async def _refuse(self, remote: str, reason: str, *, looked_up: bool) -> Actor:
        wait = await self._guard.failed(remote, looked_up=looked_up)
        if wait is not None:
            raise _too_many(wait)
        await self._tenancy.audit.failed_authentication(remote=remote, reason=reason)
        raise Unauthorized("invalid admin credential", code="invalid_admin_credential")


def _too_many(wait: float) -> RateLimited:
    return RateLimited(
        "too many failed authentications; retry later",
        code="auth_rate_limited",
        retry_after=wait,
    )
