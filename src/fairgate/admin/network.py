"""The admin listener's door: the client's address, the route classes' networks, the metrics token.

Every request to the admin listener passes here first, before authentication
and before any byte of its body is read:

1. The client's address is resolved through the trusted proxies
   (``fairgate.core.client_addr``) and written into the ASGI scope, so the
   admin authenticator, its failure limiter and the audit log see the client,
   not the proxy.
2. The path's route class (``fairgate.core.route_classes``) allowing the
   address, the request goes on (whatever ``Authorization`` it carries: the
   admin API checks its own credential).
3. From anywhere else, ``/metrics`` with ``Authorization: Bearer <metrics
   token>`` (when a ``metrics_token_file`` is set) is served; the token is
   compared as SHA-256 digests in constant time, before any failure limit, so
   a spray never locks the scraper out. Another bearer there is a failed
   authentication in the admin listener's limiter, as a wrong admin credential is:
   401 and one ``auth.failed`` audit event (its reason, the address; never the
   bearer) while the network is within its limits, 429 and no event past them.
4. Everything else gets the one 403 every class gives; the log says which
   class refused whom.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from fairgate.auth import AuthGuard
from fairgate.auth.secrets import bearer_credential, constant_time_equal, sha256
from fairgate.core.client_addr import ClientAddresses
from fairgate.core.errors import GatewayError, RateLimited, Unauthorized
from fairgate.core.route_classes import RouteRules, admin_class, refusal
from fairgate.tenancy.audit import Audit

__all__ = ["AdminDoor"]

log = logging.getLogger("fairgate.admin")


class AdminDoor:
    """ASGI middleware applying the admin listener's network rules (see the module's docstring).

    ``metrics_token_sha256`` None: no metrics token, ``/metrics`` follows its
    class's networks only. ``guard`` is the admin listener's own; ``audit``, when
    given, records each wrong metrics token counted within the limits.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        clients: ClientAddresses,
        rules: RouteRules,
        guard: AuthGuard,
        metrics_token_sha256: bytes | None = None,
        audit: Audit | None = None,
    ) -> None:
        self.app = app
        self._clients = clients
        self._rules = rules
        self._guard = guard
        self._token = metrics_token_sha256
        self._audit = audit

    def set_metrics_token_sha256(self, digest: bytes) -> None:
        """Accept another metrics token from now on (one rotated in a vault)."""
        self._token = digest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        peer = client[0] if client else ""
        address = self._clients.of(peer, scope["headers"])
        if address != peer:
            scope = {**scope, "client": (address, client[1] if client else 0)}
        route_class = admin_class(scope["path"])
        if self._rules.allows(route_class, address):
            await self.app(scope, receive, send)
            return
        if route_class == "metrics" and self._token is not None:
            presented = bearer_credential(_authorization(scope["headers"]))
            if presented is not None:
                if constant_time_equal(sha256(presented), self._token):
                    await self.app(scope, receive, send)
                else:
                    await _answer(send, await self._wrong_token(address))
                return
        log.info("refused %s from %s: not in routes.%s.allow", scope["path"], address, route_class)
        await _answer(send, refusal())

    async def _wrong_token(self, address: str) -> GatewayError:
        """A failure like a wrong admin credential (``admin.authn``): counted, and audited
        only within the limits, so a spray cannot fill the audit log."""
        log.info("refused /metrics from %s: not the metrics token", address)
        wait = await self._guard.failed(address, looked_up=False)
        if wait is not None:
            return RateLimited(
                "too many failed authentications; retry later",
                code="auth_rate_limited",
                retry_after=wait,
            )
        if self._audit is not None:
            await self._audit.failed_authentication(
                remote=address, reason="metrics: not the metrics token"
            )
        return Unauthorized("invalid metrics credential", code="invalid_metrics_credential")


def _authorization(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The first ``Authorization`` header's value, or None."""
    for name, value in headers:
        if name == b"authorization":
            return value
    return None


async def _answer(send: Send, error: GatewayError) -> None:
    body = error.body()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *error.headers(),
    ]
    # the body, if any, is never read: the connection cannot be reused after it
    headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
