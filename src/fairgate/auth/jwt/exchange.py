"""``POST /v1/auth/exchange``: a workload token in, a short-lived virtual key out.

    Authorization: Bearer <a token of an issuer under jwt.exchange>
    → 200 {"api_key": "fg-…", "key_id": "jwt-…", "expires_at": 1767225600, "expires_in": 3600,
           "team": "physics", "project": null}

The token is verified as an access token of that issuer (same rules: asymmetric
algorithms only, ``iss`` whole, ``aud``, ``exp``, the issuer's own ``map:``),
then the person it names (issuer, ``sub``) is found or created like a caller's,
and a new secret is stored for that person's key, valid ``key_ttl`` seconds. So
a batch job holds no long-lived secret, and every exchange of the same workload
identity lands on one key id: one spend line, one set of limits, whatever the
number of tokens. A person holds at most the issuer's ``max_keys`` unexpired
exchanged keys: one more revokes their oldest (like an OAuth provider's refresh
tokens), so a token exchanged in a loop, or stolen, cannot pile up secrets; a
workload that re-presents the same token after a restart still gets a key. Each
workload identity may exchange the issuer's ``exchanges_per_minute`` tokens in any
minute, counted on the state back end (every gateway together); one more is 429
``exchange_rate_exceeded`` with a ``Retry-After``, and stores nothing. The
issuer is told by the unverified ``iss``; the verification that follows is that
issuer's. Every other refusal is the bad-key 401.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import orjson

from fairgate.auth.authenticator import Authenticator, auth_unavailable
from fairgate.auth.jwt.authenticator import PersonDirectory, log_refusal, resolve_person
from fairgate.auth.jwt.mapping import Rule
from fairgate.auth.jwt.verifier import TokenRefused, TokenVerifier, looks_like_jws
from fairgate.auth.secrets import bearer_credential
from fairgate.core.errors import RateLimited, StoreUnavailable
from fairgate.core.limits import Limits

__all__ = ["EXCHANGE_COUNTER", "EXCHANGE_PATH", "ExchangeIssuer", "Exchanger", "Throttle"]

log = logging.getLogger("fairgate.auth.jwt")

EXCHANGE_PATH = "/v1/auth/exchange"
EXCHANGE_COUNTER = "exchange/"
"""Prefix of the limiter subject that counts an identity's exchanges (its key id after)."""

Throttle = Callable[[str, int], Awaitable[None]]
"""(key id, exchanges per minute) → counts one exchange of that identity, or raises
``RateLimited`` past the rate (``StateUnavailable`` is the limiter's to answer: 503)."""

MintKey = Callable[[str, float, int], Awaitable[tuple[str, float, int]]]
"""(key id, ttl seconds, keys kept) → (secret, expires_at, revoked):
``fairgate.tenancy.People.exchange_key`` (the person's oldest unexpired keys past the
number kept are revoked, in the store, and counted)."""


@dataclass(frozen=True, slots=True)
class ExchangeIssuer:
    verifier: TokenVerifier
    rules: Sequence[Rule]
    key_ttl: float
    max_keys: int
    per_minute: int  # exchanges per identity a minute (the config's default rules)


class Exchanger:
    """Turns a workload token into a short-lived key (see the module docstring)."""

    def __init__(
        self,
        issuers: Sequence[ExchangeIssuer],
        keys: Authenticator,
        people: PersonDirectory,
        mint: MintKey,
        *,
        limits: Limits,
        throttle: Throttle | None = None,
        on_refused: Callable[[str], None] = lambda _reason: None,
        on_exchanged: Callable[[str, int], None] = lambda _outcome, _revoked: None,
    ) -> None:
        self._throttle = throttle
        self._on_exchanged = on_exchanged
        self._issuers = {i.verifier.issuer: i for i in issuers}
        self._keys = keys
        self._people = people
        self._mint = mint
        self._limits = limits
        self._on_refused = on_refused

    @property
    def verifiers(self) -> list[TokenVerifier]:
        return [i.verifier for i in self._issuers.values()]

    async def exchange(self, authorization: bytes | None, client_addr: str) -> bytes:
        """The JSON answer for a valid workload token; raises the bad-key 401 otherwise."""
        token = bearer_credential(authorization)
        subject = "-"
        try:
            if token is None or not looks_like_jws(token):
                raise TokenRefused("not_a_token")
            issuer = self._issuer_of(token)
            claims = await issuer.verifier.verify(token)
            subject = claims.subject
            record = await resolve_person(self._people, claims, issuer.rules, self._limits)
            if self._throttle is not None:
                await self._count(record.key_id, issuer.per_minute, client_addr)
            secret, expires_at, revoked = await self._mint(
                record.key_id, issuer.key_ttl, issuer.max_keys
            )
        except TokenRefused as refused:
            self._on_refused(refused.reason)
            log_refusal("token exchange", client_addr, refused, subject)
            raise await self._keys.refusal(client_addr) from None
        except StoreUnavailable as exc:
            raise auth_unavailable("token exchange failed: the store", exc) from None
        self._on_exchanged("issued", revoked)
        log.info(
            "token exchange from %s: key %s for %r of %s, %.0fs",
            client_addr,
            record.key_id,
            subject[:128],
            claims.issuer,
            issuer.key_ttl,
        )
        return orjson.dumps(
            {
                "object": "fairgate.exchanged_key",
                "api_key": secret,
                "key_id": record.key_id,
                "expires_at": int(expires_at),
                "expires_in": int(issuer.key_ttl),
                "team": record.team,
                "project": record.project,
            }
        )

    async def _count(self, key_id: str, per_minute: int, client_addr: str) -> None:
        assert self._throttle is not None
        try:
            await self._throttle(key_id, per_minute)
        except RateLimited as limited:
            self._on_exchanged("rate_limited", 0)
            log.warning(
                "token exchange from %s refused: key %s past %d exchanges a minute",
                client_addr,
                key_id,
                per_minute,
            )
            raise RateLimited(
                f"Token exchange limit: this workload identity may exchange {per_minute}"
                " tokens per minute; use the key it holds until it expires.",
                code="exchange_rate_exceeded",
                retry_after=limited.retry_after,
            ) from None

    def _issuer_of(self, token: str) -> ExchangeIssuer:
        any_verifier = next(iter(self._issuers.values())).verifier
        _header, iss = any_verifier.header_and_issuer(token)
        issuer = self._issuers.get(iss) if isinstance(iss, str) else None
        if issuer is None:
            raise TokenRefused("wrong_issuer")
        return issuer
