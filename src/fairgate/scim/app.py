"""``/scim/v2`` on the admin listener: scim2-server's ASGI application behind the provider's token.

Every request but ``GET /ServiceProviderConfig`` (which RFC 7643 §5 leaves open)
must carry ``Authorization: Bearer <scim.token_file>``. The token is compared
as SHA-256 digests in constant time, before any failure limit, so a spray never
locks the provider out; any other credential is one failure of the client's
network in the admin listener's limiter (``fairgate.auth.AuthGuard``, the one
admin tokens count in) and one ``auth.failed`` audit event: 401 while the
network is within its limits, 429 with ``Retry-After`` past them. Every answer,
refusals included, is a SCIM error document (``urn:…:api:messages:2.0:Error``);
a store that does not answer is a 503 of the same shape, never a 401.
"""

from __future__ import annotations

import logging
import math
from http import HTTPStatus
from typing import Any

from scim2_models import SCIMException, ScimProvider, UnauthorizedException
from scim2_server.applications.asgi import ASGIApplication, Receive, Scope
from scim2_server.requests import ScimRequest
from scim2_server.responses import ScimResponse
from scim2_server.service import ScimService

from fairgate.auth import AuthGuard, sha256
from fairgate.auth.secrets import constant_time_equal
from fairgate.config.scim import MIN_SCIM_TOKEN_BYTES
from fairgate.core.errors import StoreUnavailable
from fairgate.observability.scim_metrics import ScimMetrics
from fairgate.scim.storage import StoreScimStorage
from fairgate.tenancy.audit import Audit

__all__ = ["ScimApp"]

log = logging.getLogger("fairgate.scim")


class _Throttled(SCIMException):
    """The client's network is over the failed-authentication limits."""

    status = 429
    _default_detail = "too many failed authentications; retry later"

    def __init__(self, retry_after: float) -> None:
        super().__init__()
        self.retry_after = retry_after


class _Unavailable(SCIMException):
    status = 503
    _default_detail = "the gateway's store does not answer; retry later"


class ScimApp(ASGIApplication):
    """The SCIM endpoints (see the module docstring); ``set_token`` follows a rotated token."""

    def __init__(
        self,
        storage: StoreScimStorage,
        provider: ScimProvider,
        *,
        token: str,
        guard: AuthGuard,
        audit: Audit,
        metrics: ScimMetrics,
    ) -> None:
        # The cursor secret is derived from the token, so every replica seals alike.
        service = ScimService(provider, secret=sha256("fairgate scim cursors\0" + token))
        super().__init__(storage, provider, service)
        self.log = log
        self._digest = sha256(token)
        self._guard = guard
        self._audit = audit
        self._metrics = metrics

    def set_token(self, token: str) -> None:
        """Accept this token from now on (a token rotated in a vault); one shorter than
        32 bytes is refused, logged, and the previous token stays in use."""
        if len(token.encode()) < MIN_SCIM_TOKEN_BYTES:
            log.error(
                "scim: the rotated token has %d bytes, fewer than %d; the previous token "
                "stays in use",
                len(token.encode()),
                MIN_SCIM_TOKEN_BYTES,
            )
            return
        self._digest = sha256(token)

    async def read_request(self, scope: Scope, receive: Receive) -> ScimRequest:
        request = await super().read_request(scope, receive)
        client = scope.get("client")
        request.subject = client[0] if client else "unknown"
        return request

    def get_subject(self, request: ScimRequest) -> Any:
        return request.subject

    async def dispatch_request(self, request: ScimRequest) -> ScimResponse:
        if self.needs_auth(request):
            await self._authenticate(request, str(request.subject))
        return await self.handler.handle(request)

    async def _authenticate(self, request: ScimRequest, remote: str) -> None:
        scheme, _, credential = (request.header("Authorization") or "").partition(" ")
        presented = credential.strip() if scheme.lower() == "bearer" else ""
        if presented and constant_time_equal(sha256(presented), self._digest):
            return
        wait = await self._guard.failed(remote, looked_up=False)
        if wait is not None:
            self._metrics.refused("rate_limited")
            raise _Throttled(wait)
        self._metrics.refused("bad_token")
        log.info("scim: refused a request from %s: no or a wrong bearer token", remote)
        await self._audit.failed_authentication(remote=remote, reason="scim: wrong bearer token")
        raise UnauthorizedException(detail="invalid SCIM bearer token")

    def handle_exception(self, request: ScimRequest, exception: Exception) -> ScimResponse:
        if isinstance(exception, StoreUnavailable):
            log.error("scim: the store is unavailable: %s", exception)
            return self.service.error_response(_Unavailable())
        response = super().handle_exception(request, exception)
        if isinstance(exception, _Throttled):
            response.headers["Retry-After"] = str(max(1, math.ceil(exception.retry_after)))
        if response.status == HTTPStatus.INTERNAL_SERVER_ERROR:
            response.body = self.service.error_response(SCIMException()).body
        return response
