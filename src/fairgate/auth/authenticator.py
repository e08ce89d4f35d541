"""The Authenticator: an ``Authorization`` header and a client address → a ``Principal``.

    header missing or not "Bearer …"         → 401 missing_api_key
    not shaped like a key                    → 401 invalid_api_key
    valid key in the cache                   → Principal (no failure limit, no store)
    digest in the miss cache                 → 401 invalid_api_key (429 once the network
                                               is over its limits), failure counted
    digest known valid, cache entry expired  → store lookup outside the guard
    otherwise the guard (``AuthGuard``) refuses → 429 with Retry-After, no lookup
    store cannot answer                      → 503, not cached, not counted
    unknown, revoked, expired, grace over    → 401 invalid_api_key (429 once the network
                                               is over its limits), cached as a miss, counted
    valid                                    → Principal, cached as a hit, whatever the
                                               network's failure count
    valid, client address outside an IP      → 403 address_not_allowed (cached or looked
    allowlist of its org, team or key          up; no failure counted, the list logged)

A check made again for a request already in flight (``rechecking``: its key, team or
person changed) is no caller's attempt: it takes no slot of the guard and counts no
failure, so a key found refused is the 401 whatever the network's failure count (a
429 there would be no verdict, and the request would run on).

Every refusal of a key, whatever its reason, is the same 401 with the same
bytes, so a caller cannot tell a revoked key from one that never existed. The
reason is logged (key id and display prefix at most, never the secret). A
valid key used from outside one of its IP allowlists gets one 403 whichever
list refused it; which one is logged.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace

from fairgate.auth.allowlist import ResolveModels, allowed_models
from fairgate.auth.cache import Grant, KeyCache
from fairgate.auth.ceiling import Slot
from fairgate.auth.directory import KeyDirectory
from fairgate.auth.guard import MALFORMED, MISSING, AuthGuard, Refusal
from fairgate.auth.pepper import KeyHasher
from fairgate.auth.secrets import bearer_credential, constant_time_equal, looks_like_key, sha256
from fairgate.core.address_lists import AddressRule
from fairgate.core.clock import Clock
from fairgate.core.errors import (
    Forbidden,
    GatewayError,
    RateLimited,
    ServiceUnavailable,
    StoreUnavailable,
    Unauthorized,
)
from fairgate.core.principal import KeyRecord, Principal

__all__ = ["Authenticator", "auth_unavailable", "invalid_credential", "rechecking"]

log = logging.getLogger("fairgate.auth")

_MISSING = "missing API key: send it as 'Authorization: Bearer <key>'"
_INVALID = "invalid API key"
_OUTSIDE = "requests with this key are not allowed from this address"
ADDRESS_NOT_ALLOWED = "address_not_allowed"
"""The refusal reason (and error code) of a valid key used from outside an IP allowlist."""

_RECHECK: ContextVar[bool] = ContextVar("fairgate_auth_recheck", default=False)


@contextmanager
def rechecking() -> Iterator[None]:
    """Within it, authentication is a check made again for a request in flight (see the
    module text): no guard slot, no failure counted, a refused key always the 401."""
    token = _RECHECK.set(True)
    try:
        yield
    finally:
        _RECHECK.reset(token)


class Authenticator:
    """Turns a bearer virtual key into the request's ``Principal``, or refuses it.

    ``authenticate`` raises ``Unauthorized`` (401), ``RateLimited`` (429, with
    ``retry_after`` seconds, from the client listener's ``guard``) or
    ``ServiceUnavailable`` (503, when the directory raises ``StoreUnavailable``);
    it reads nothing from the request but the header and the client address,
    so no client-sent priority, band or identity can reach the principal.
    ``client_addr`` is the client's address as resolved from the connection
    and trusted proxies.

    Concurrent requests with the same uncached secret share one directory
    lookup (asked again only if the request that asked goes away first).
    ``resolve_models`` maps configured model names to canonical ones (see
    ``ModelResolver``); it is called on each store lookup, not per request, and
    so are the IP allowlists parsed: per request, a key with lists costs one
    address parse and a set lookup per prefix length of each list, a key without
    lists nothing.

    The cache is keyed by the SHA-256 of the secret, pepper or not, so a cached
    key costs what it did without a pepper. ``hasher`` (``KeyHasher``) turns the
    secret into the store's digest on each store lookup only; a key found by its
    pre-pepper digest is re-hashed in the store then (once: later lookups find
    the new digest), and a store that cannot take the re-hash does not refuse the
    key (it is tried again on the next lookup).
    """

    def __init__(
        self,
        directory: KeyDirectory,
        cache: KeyCache,
        guard: AuthGuard,
        resolve_models: ResolveModels,
        clock: Clock,
        hasher: KeyHasher | None = None,
    ) -> None:
        self._directory = directory
        self._hasher = hasher or KeyHasher()
        self._cache = cache
        self._guard = guard
        self._resolve = resolve_models
        self._clock = clock
        self._pending: dict[bytes, asyncio.Future[tuple[KeyRecord | None, int] | _Abandoned]] = {}

    async def authenticate(self, authorization: bytes | None, client_addr: str) -> Principal:
        """The principal the header's key stands for; see the module docstring for refusals."""
        secret = bearer_credential(authorization)
        if secret is None:
            self._guard.refused(MISSING)
            raise Unauthorized(_MISSING, code="missing_api_key")
        if not looks_like_key(secret):
            log.debug("authentication refused from %s: not shaped like a key", client_addr)
            self._guard.refused(MALFORMED)
            raise _invalid()
        digest = sha256(secret)
        grant = self._cache.hit(digest)
        if grant is not None:
            # most keys never expire: no clock to read for them
            if grant.until == math.inf or self._clock.wall() < grant.until:
                principal = grant.principal
                if principal.addresses is None:
                    return principal  # no IP allowlist: nothing to place
                return self._placed(principal, client_addr)
            self._cache.invalidate(digest)  # expired or grace over since it was cached
        if self._cache.is_miss(digest):
            log.debug("authentication refused from %s: known miss", client_addr)
            raise await self._refused(client_addr, looked_up=False)
        slot = (
            None
            if self._cache.was_valid(digest) or _RECHECK.get()
            else self._guard.admit(client_addr)
        )
        if isinstance(slot, Refusal):
            log.debug("authentication refused from %s: %s", client_addr, slot.reason)
            raise _too_many(slot.retry_after)
        return self._placed(await self._look_up(digest, secret, client_addr, slot), client_addr)

    def placed(self, principal: Principal, client_addr: str) -> Principal:
        """``principal`` if ``client_addr`` lies within its IP allowlists, else 403 (for
        another way in to a key's principal, such as an access token)."""
        return self._placed(principal, client_addr)

    def principal_of(self, record: KeyRecord) -> Principal:
        """The principal a valid ``record`` stands for (allowlists, models, limits)."""
        return self._principal(record)

    async def refusal(self, client_addr: str) -> GatewayError:
        """The answer to a refused credential of another kind: the same 401 as a bad key
        (429 once the network is over its limits), the failure counted."""
        return await self._refused(client_addr, looked_up=True)

    def _placed(self, principal: Principal, client_addr: str) -> Principal:
        """``principal``, if ``client_addr`` lies within every IP allowlist of its key."""
        rule = principal.addresses
        if rule is None:
            return principal
        refused_by = rule.refusal(client_addr)
        if refused_by is None:
            return principal
        log.info(
            "request refused from %s: key %s is outside the IP allowlist of %s",
            client_addr,
            principal.key_id,
            refused_by,
        )
        self._guard.refused(ADDRESS_NOT_ALLOWED)
        raise Forbidden(_OUTSIDE, code=ADDRESS_NOT_ALLOWED)

    async def _look_up(
        self, digest: bytes, secret: str, client_addr: str, slot: Slot | None
    ) -> Principal:
        now = self._clock.wall()
        stored = self._hasher.digest(secret)
        try:
            record, epoch = await self._find(digest, secret, stored, now)
        except StoreUnavailable as exc:
            self._guard.unavailable(slot)
            raise auth_unavailable("authentication unavailable: the key store", exc) from None
        except BaseException:
            self._guard.abandoned(slot)
            raise
        grant = self._grant(record, stored, now, client_addr)
        if grant is None:
            self._cache.add_miss(digest)
            raise await self._refused(client_addr, looked_up=True)
        self._guard.valid(slot)
        self._cache.add_hit(digest, grant, epoch=epoch)
        return grant.principal

    async def _refused(self, client_addr: str, *, looked_up: bool) -> GatewayError:
        """The answer to a refused key: 401, or 429 once the network is over its limits
        (a check made again for a request in flight: the 401, nothing counted)."""
        if _RECHECK.get():
            return _invalid()
        wait = await self._guard.failed(client_addr, looked_up=looked_up)
        return _invalid() if wait is None else _too_many(wait)

    async def _find(
        self, digest: bytes, secret: str, stored: bytes, now: float
    ) -> tuple[KeyRecord | None, int]:
        """The directory's answer for ``digest``, shared with concurrent callers, and the
        cache's epoch when it was asked (a change applied since: the answer is not cached)."""
        shared = self._pending.get(digest)
        if shared is not None:
            # Shielded: a caller that goes away must not cancel the others' answer.
            outcome = await asyncio.shield(shared)
            if not isinstance(outcome, _Abandoned):
                return outcome
            # The caller that asked went away before the answer: ask again ourselves.
        return await self._ask(digest, secret, stored, now)

    async def _ask(
        self, digest: bytes, secret: str, stored: bytes, now: float
    ) -> tuple[KeyRecord | None, int]:
        epoch = self._cache.epoch
        if digest in self._pending:  # someone else asks already; do not wait twice
            return await self._stored_record(secret, stored, now), epoch
        shared: asyncio.Future[tuple[KeyRecord | None, int] | _Abandoned]
        shared = self._pending[digest] = asyncio.get_running_loop().create_future()
        try:
            record = await self._stored_record(secret, stored, now)
        except StoreUnavailable as exc:
            shared.set_exception(exc)
            shared.exception()  # retrieved, even when nobody else was waiting
            raise
        except BaseException:
            shared.set_result(_Abandoned())
            raise
        finally:
            del self._pending[digest]
        shared.set_result((record, epoch))
        return record, epoch

    async def _stored_record(self, secret: str, stored: bytes, now: float) -> KeyRecord | None:
        """The directory's record for ``secret``, a pre-pepper digest re-hashed on the way."""
        legacy = self._hasher.legacy(secret)
        if legacy is None:
            return await self._directory.find_key(stored, now)
        record = await self._directory.find_key(stored, now, legacy)
        if record is None:
            return None
        if constant_time_equal(record.secret_sha256, legacy):
            record = replace(record, secret_sha256=stored)
        elif record.previous_sha256 is not None and constant_time_equal(
            record.previous_sha256, legacy
        ):
            record = replace(record, previous_sha256=stored)
        else:
            return record
        try:
            await self._directory.rehash(record.key_id, legacy, stored)
            log.info("key %s (%s) re-hashed with the key pepper", record.key_id, record.prefix)
        except StoreUnavailable as exc:
            log.warning("key %s not re-hashed with the key pepper: %s", record.key_id, exc)
        return record

    def _grant(
        self, record: KeyRecord | None, digest: bytes, now: float, client_addr: str
    ) -> Grant | None:
        """The grant for a valid secret, or None (the reason logged)."""
        if record is None:
            log.debug("authentication refused from %s: unknown key", client_addr)
            return None
        reason = _refusal(record, digest, now)
        if reason is not None:
            log.info(
                "authentication refused from %s: key %s (%s) %s",
                client_addr,
                record.key_id,
                record.prefix,
                reason,
            )
            return None
        until = math.inf if record.expires_at is None else record.expires_at
        if record.previous_until is not None and not constant_time_equal(
            digest, record.secret_sha256
        ):
            until = min(until, record.previous_until)  # the old secret, within its grace
        return Grant(self._principal(record), until)

    def _principal(self, record: KeyRecord) -> Principal:
        return Principal(
            key_id=record.key_id,
            org=record.org,
            team=record.team,
            project=record.project,
            tags=record.tags,
            models=allowed_models(record.team_models, record.models, self._resolve),
            expires_at=record.expires_at,
            limits=record.limits,
            team_limits=record.team_limits,
            addresses=AddressRule.of(
                (
                    (f"org {record.org}", record.org_cidrs),
                    (f"team {record.team}", record.team_cidrs),
                    (f"key {record.key_id}", record.cidrs),
                )
            ),
        )


class _Abandoned:
    """The answer waiters get when the caller that asked the directory went away first."""


def _refusal(record: KeyRecord, digest: bytes, now: float) -> str | None:
    """Why ``record`` does not accept ``digest`` at ``now``, or None if it does."""
    if record.revoked_at is not None:
        return "is revoked"
    if record.expires_at is not None and now >= record.expires_at:
        return "has expired"
    if constant_time_equal(digest, record.secret_sha256):
        return None
    if record.previous_sha256 is None or not constant_time_equal(digest, record.previous_sha256):
        return "does not match this digest (directory error)"
    if record.previous_until is None or now >= record.previous_until:
        return "was presented with its old secret after the rotation's grace period"
    return None


def _invalid() -> Unauthorized:
    return Unauthorized(_INVALID, code="invalid_api_key")


def invalid_credential() -> Unauthorized:
    """The one 401 every refused credential gets, byte for byte (a bad key's)."""
    return _invalid()


def auth_unavailable(what: str, exc: StoreUnavailable) -> ServiceUnavailable:
    """The 503 of a credential the store could not check; ``what`` names it in the log."""
    log.warning("%s did not answer: %s", what, exc)
    return ServiceUnavailable("authentication is temporarily unavailable", code="auth_unavailable")


def _too_many(wait: float) -> RateLimited:
    return RateLimited(
        "too many failed authentications; retry later",
        code="too_many_auth_failures",
        retry_after=wait,
    )
