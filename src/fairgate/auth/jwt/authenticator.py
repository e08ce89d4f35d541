"""Access tokens on the inference API: a JWS-shaped bearer → the principal of its person.

    bearer has no two dots               → the virtual-key Authenticator, unchanged
    token in the cache, before its exp   → Principal (nothing verified again)
    digest a known refusal               → 401
    verify (``TokenVerifier``)           → refused: 401, reason logged and counted
    map rules (``place``)                → none matches: 401 ``unmapped``
    the person's key row (``People``)    → created on first sight; revoked,
                                           or its team missing: 401
    valid                                → Principal of the person's key, cached
                                           until the token's exp

Every refusal is the virtual-key refusal, byte for byte (``invalid_credential``),
and counts as a failed authentication of the client's network like a bad key.
The reason (``expired``, ``wrong_audience``, ``revoked`` …) goes to the log and
to ``on_refused`` only. Cached tokens live in the key cache, so its bounds hold
and the access-change feed withdraws them: a revoked person (a ``key`` change
naming their key id), a disabled team or organisation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from fairgate.auth.authenticator import Authenticator, auth_unavailable
from fairgate.auth.cache import Grant, KeyCache
from fairgate.auth.jwt.mapping import Placement, Rule, person_key_id, place
from fairgate.auth.jwt.verifier import Claims, TokenRefused, TokenVerifier, looks_like_jws
from fairgate.auth.secrets import bearer_credential, sha256
from fairgate.core.clock import Clock
from fairgate.core.errors import StoreUnavailable
from fairgate.core.limits import Limits
from fairgate.core.principal import KeyRecord, Principal

__all__ = ["PersonDirectory", "TokenAuthenticator", "log_refusal", "resolve_person"]

log = logging.getLogger("fairgate.auth.jwt")

# Refusals that hold for the token whatever happens later: remembered as misses.
_FINAL = frozenset(
    {
        "malformed",
        "alg_refused",
        "header_refused",
        "id_token",
        "wrong_issuer",
        "wrong_audience",
        "bad_signature",
        "no_expiry",
        "no_subject",
        "expired",
        "unmapped",
    }
)


class PersonDirectory(Protocol):
    """Where a person's synthetic key lives (``fairgate.tenancy.People`` implements it)."""

    async def person(
        self, key_id: str, issuer: str, subject: str, placement: Placement, limits: Limits
    ) -> KeyRecord | None:
        """The person's key record, created on first sight and moved to ``placement``
        (with ``limits``) when it changed; None when the team or project does not exist.
        Raises ``StoreUnavailable`` when the store cannot answer."""
        ...


async def resolve_person(
    people: PersonDirectory, claims: Claims, rules: Sequence[Rule], limits: Limits
) -> KeyRecord:
    """The valid key record of a verified token's person, or TokenRefused."""
    placement = place(rules, claims.values)
    if placement is None:
        raise TokenRefused("unmapped")
    key_id = person_key_id(claims.issuer, claims.subject)
    record = await people.person(key_id, claims.issuer, claims.subject, placement, limits)
    if record is None:
        raise TokenRefused("unknown_team")
    if record.revoked_at is not None:
        raise TokenRefused("revoked")
    return record


class TokenAuthenticator:
    """The inference API's authentication with a ``jwt:`` block (see the module docstring).

    ``keys`` authenticates everything that is not JWS-shaped and supplies the
    refusals; ``limits`` are every person's (the block's ``rpm``, ``tpm``,
    ``max_inflight``).
    """

    def __init__(
        self,
        keys: Authenticator,
        verifier: TokenVerifier,
        rules: Sequence[Rule],
        people: PersonDirectory,
        cache: KeyCache,
        clock: Clock,
        *,
        limits: Limits,
        on_refused: Callable[[str], None] = lambda _reason: None,
    ) -> None:
        self._keys = keys
        self._verifier = verifier
        self._rules = tuple(rules)
        self._people = people
        self._cache = cache
        self._clock = clock
        self._limits = limits
        self._on_refused = on_refused

    async def authenticate(self, authorization: bytes | None, client_addr: str) -> Principal:
        secret = bearer_credential(authorization)
        if secret is None or not looks_like_jws(secret):
            return await self._keys.authenticate(authorization, client_addr)
        digest = sha256(secret)
        grant = self._cache.hit(digest)
        if grant is not None:
            if self._clock.wall() < grant.until:
                return self._keys.placed(grant.principal, client_addr)
            self._cache.invalidate(digest)
        if self._cache.is_miss(digest):
            self._on_refused("known_refusal")
            log.info("access token refused from %s: refused before", client_addr)
            raise await self._keys.refusal(client_addr)
        epoch = self._cache.epoch
        subject = "-"
        try:
            claims = await self._verifier.verify(secret)
            subject = claims.subject
            record = await resolve_person(self._people, claims, self._rules, self._limits)
        except TokenRefused as refused:
            self._on_refused(refused.reason)
            log_refusal("access token", client_addr, refused, subject)
            if refused.reason in _FINAL:
                self._cache.add_miss(digest)
            raise await self._keys.refusal(client_addr) from None
        except StoreUnavailable as exc:
            raise auth_unavailable("access token not checked: the store", exc) from None
        principal = self._keys.principal_of(record)
        self._cache.add_hit(digest, Grant(principal, claims.expires_at), epoch=epoch)
        return self._keys.placed(principal, client_addr)


def log_refusal(what: str, client_addr: str, refused: TokenRefused, subject: str) -> None:
    """The server's log line of a refused token (the caller sees the bad-key 401)."""
    log.info(
        "%s refused from %s: %s (subject %r)", what, client_addr, refused.reason, subject[:128]
    )
