"""``previous_response_id``: a tenant continues only the responses it was given.

An engine's Responses API store is shared by every tenant behind the gateway
(one internal key), so ``previous_response_id`` naming another tenant's answer
would hand that tenant's conversation to the caller. The gateway remembers the
scope that received each response id it relayed (the id of a plain answer, or
of a stream's ``response.created`` event, written before the answer is relayed
so a follow-up cannot outrun it) and refuses a continuation from any other
scope with 400 ``field_not_allowed`` naming the field — the same answer for an
id it never relayed, so the check tells nobody whether an id exists.

The scope is the cache-isolation scope (``cache_isolation.scope``: organisation
by default, or team, or key; with isolation off, ``none``, the organisation),
stored as a SHA-256 digest of its name, so the state back end holds no tenant
names and every gateway replica derives the same owner. Requests without the field
cost nothing; one with it costs one state read; each relayed response one write.
A state back end that fails refuses the continuation (503), and a response
whose owner could not be written cannot be continued: both fail closed.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Literal, Protocol

import orjson

from fairgate.core.errors import ServiceUnavailable
from fairgate.core.principal import Principal
from fairgate.engines import FieldRefused
from fairgate.limits import StateUnavailable
from fairgate.proxy.exchange import Exchange

__all__ = ["RESPONSES_ROUTE", "ResponseOwners", "ResponseScope"]

log = logging.getLogger("fairgate.proxy")

RESPONSES_ROUTE = "/v1/responses"
_FIELD = "previous_response_id"
_CREATED = b'"response.created"'
_MAX_ID = 256


class ResponseOwners(Protocol):
    """Owner scope per response id, kept for the back end's ttl. Raises
    ``StateUnavailable`` when the back end fails."""

    async def remember(self, response_id: str, owner: str) -> None: ...

    async def owner_of(self, response_id: str) -> str | None: ...


def _refused() -> FieldRefused:
    return FieldRefused(
        f"'{_FIELD}' does not name a response this key may continue",
        code="field_not_allowed",
        field=_FIELD,
    )


class ResponseScope:
    """Checks continuations and remembers the ids relayed (see the module text)."""

    def __init__(
        self, owners: ResponseOwners, scope: Literal["org", "team", "key", "none"] = "org"
    ) -> None:
        self._owners = owners
        self._scope = "org" if scope == "none" else scope

    async def check(self, ex: Exchange) -> None:
        """Refuse a ``previous_response_id`` the caller's scope did not receive."""
        if ex.endpoint != RESPONSES_ROUTE or ex.parsed is None:
            return
        values = [ex.parsed.get(_FIELD)]
        nested = ex.parsed.get("extra_body")
        if isinstance(nested, dict):
            values.append(nested.get(_FIELD))
        for value in values:
            if value is None:
                continue
            if not isinstance(value, str) or len(value) > _MAX_ID:
                raise _refused()
            try:
                owner = await self._owners.owner_of(value)
            except StateUnavailable as exc:
                log.warning("request %s: response owners unavailable: %s", ex.request_id, exc)
                raise ServiceUnavailable(
                    "the gateway cannot check this request right now", code="state_unavailable"
                ) from None
            if owner is None or owner != self._owner(ex.principal):
                log.info("request %s refused: %s not the caller's", ex.request_id, _FIELD)
                raise _refused()

    async def relayed_body(self, ex: Exchange, status: int, body: bytes) -> None:
        """Remember the id of a plain Responses API answer (before it is relayed); the relay
        calls it on that route only, as it calls ``relayed_event``."""
        if status != 200:
            return
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if isinstance(document, dict):
            await self._remember(ex, document.get("id"))

    async def relayed_event(self, ex: Exchange, event: bytes) -> None:
        """Remember the id of a stream's ``response.created`` event (before it is relayed)."""
        if ex.endpoint != RESPONSES_ROUTE or _CREATED not in event:
            return
        data = b"\n".join(
            line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:")
        )
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        response = document.get("response") if isinstance(document, dict) else None
        if isinstance(response, dict):
            await self._remember(ex, response.get("id"))

    async def _remember(self, ex: Exchange, response_id: Any) -> None:
        if not isinstance(response_id, str) or not response_id or len(response_id) > _MAX_ID:
            return
        try:
            await self._owners.remember(response_id, self._owner(ex.principal))
        except StateUnavailable as exc:
            log.warning("request %s: response owner not written: %s", ex.request_id, exc)

    def _owner(self, principal: Principal | None) -> str:
        if principal is None:
            name = "none:"
        elif self._scope == "team":
            name = f"team:{principal.org}/{principal.team}"
        elif self._scope == "key":
            name = "key:" + principal.key_id
        else:
            name = "org:" + principal.org
        return hashlib.sha256(name.encode()).hexdigest()
