"""Who calls the admin API: the master key or a user's admin token, or 401.

    Authorization: Bearer <master key>    proxy_admin at the root
    Authorization: Bearer fga-…           the token's user with their current role bindings

The master key is compared as SHA-256 digests in constant time, so neither its
length nor its content leaks through timing. Admin tokens are resolved in the
store on every request (no cache: a revoked token or removed role applies at
once). Each refused credential (missing, malformed, unknown, revoked, expired)
is one 401 with the same body, one audit event ``auth.failed`` and one failure
in the per-network limiter; a network over its limit gets 429 before any lookup.
"""

from __future__ import annotations

from typing import Protocol

from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import Request

from fairgate.auth.secrets import ADMIN_TOKEN_PREFIX, constant_time_equal, looks_like_key, sha256
from fairgate.core.errors import RateLimited, Unauthorized
from fairgate.tenancy import Actor, Tenancy

__all__ = ["AdminAuthenticator", "FailureLimiter"]


class FailureLimiter(Protocol):
    """Failed authentications per client network (``fairgate.auth.FailureLimiter``).

    ``blocked(addr)`` is the seconds to wait, or None when the network may try;
    ``failed(addr)`` counts one failure.
    """

    def blocked(self, addr: str) -> float | None: ...

    def failed(self, addr: str) -> None: ...


bearer = HTTPBearer(auto_error=False, description="The master key or an admin token (fga-…)")


class AdminAuthenticator:
    """Resolves the caller of an admin request to an :class:`Actor` (a FastAPI dependency).

    ``master_key_sha256`` None disables the master key (only admin tokens work).
    Raises RateLimited (429) for a blocked network, Unauthorized (401) for any
    refused credential, StoreUnavailable when a token cannot be looked up.
    """

    def __init__(
        self,
        tenancy: Tenancy,
        *,
        master_key_sha256: bytes | None,
        failure_limiter: FailureLimiter,
    ) -> None:
        self._tenancy = tenancy
        self._master = master_key_sha256
        self._limiter = failure_limiter

    async def __call__(
        self, request: Request, credentials: HTTPAuthorizationCredentials | None
    ) -> Actor:
        remote = request.client.host if request.client else "unknown"
        wait = self._limiter.blocked(remote)
        if wait is not None:
            raise RateLimited(
                "too many failed authentications from your network",
                code="auth_rate_limited",
                retry_after=wait,
            )
        secret = credentials.credentials if credentials is not None else None
        if secret is None:
            return await self._refuse(remote, "no bearer credential")
        if self._master is not None and constant_time_equal(sha256(secret), self._master):
            return Actor.master_key(remote)
        if looks_like_key(secret, prefix=ADMIN_TOKEN_PREFIX):
            actor = await self._tenancy.admin_tokens.authenticate(secret, remote=remote)
            if actor is not None:
                return actor
            return await self._refuse(remote, "unknown, revoked or expired admin token")
        return await self._refuse(remote, "not the master key nor an admin token")

    async def _refuse(self, remote: str, reason: str) -> Actor:
        self._limiter.failed(remote)
        await self._tenancy.audit.failed_authentication(remote=remote, reason=reason)
        raise Unauthorized("invalid admin credential", code="invalid_admin_credential")
