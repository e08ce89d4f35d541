"""The identify stage: the request's credential becomes a ``Principal``.

It runs before the path is resolved, so no client route is reachable without a key
(an unknown path answers 401 too, not 404). The credential itself is checked by
``fairgate.auth`` (the key cache, the store on a miss, the failed-authentication
limits); this stage adds what the request head decides before that: the route
class's network rule for inference, and the refusal of two credentials at once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fairgate.auth import invalid_credential
from fairgate.core.principal import Principal
from fairgate.core.route_classes import RouteRules, refusal
from fairgate.proxy.exchange import Exchange

__all__ = ["Identify"]

log = logging.getLogger("fairgate.proxy")


class Identify:
    """``authenticate(authorization, client_addr)`` is ``auth``'s check of a bearer;
    ``rules`` the listener's route-class rules (None, or no rule for inference: no
    request pays for a check)."""

    __slots__ = ("_authenticate", "_rules")

    def __init__(
        self,
        authenticate: Callable[[bytes | None, str], Awaitable[Principal]],
        rules: RouteRules | None = None,
    ) -> None:
        self._authenticate = authenticate
        self._rules = rules if rules is not None and rules.restricts("inference") else None

    def allowed(self, ex: Exchange) -> None:
        """Refuse (403) a client the inference route class does not allow, and (401) a
        request with more than one credential (``ex.credentials``, counted by the read
        stage's head scan): never a silent choice between two."""
        if self._rules is not None and not self._rules.allows("inference", ex.client):
            log.info("refused %s from %s: not in routes.inference.allow", ex.request_id, ex.client)
            raise refusal()
        if ex.credentials > 1:
            log.info("refused %s from %s: %d credentials", ex.request_id, ex.client, ex.credentials)
            raise invalid_credential()

    async def enter(self, ex: Exchange, authorization: bytes | None) -> Principal:
        """The principal ``authorization`` stands for, set on ``ex``; or the refusal."""
        self.allowed(ex)
        ex.principal = principal = await self._authenticate(authorization, ex.client)
        return principal
