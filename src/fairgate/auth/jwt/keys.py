"""An issuer's signing keys: discovery, the JWKS, and how often they are fetched.

    source = KeySource(issuer, jwks_url=None, min_refresh=60.0, clock=clock)
    await source.start()                  # discovery (unless jwks_url) and the first key set
    key = await source.key("kid-1")       # a public key, or None

A ``kid`` the key set lacks makes it fetched again, at most once per
``min_refresh`` seconds whatever the number of unknown kids, and never twice at
once: concurrent callers wait on the same fetch (single flight), callers
arriving while the last fetch is younger than ``min_refresh`` get None at once.
Only asymmetric signing keys are kept (RSA, EC, OKP; a key marked ``use: enc``
is dropped), so no published key can ever be an HMAC secret. A set holding no such
key is the provider's fault, not a rotation: it replaces nothing (the keys known so
far stay; at start-up the provider counts as unavailable). Every URL is https
(http only for a loopback host); requests follow no redirect, ignore proxy
variables of the environment, and read at most 512 KiB.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import orjson
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, KeySet, OKPKey, RSAKey

from fairgate.config.sso import secure_url
from fairgate.core.clock import Clock

__all__ = ["FetchJson", "KeySource", "ProviderUnavailable", "PublicKey", "get_json"]

log = logging.getLogger("fairgate.auth.jwt")

PublicKey = RSAKey | ECKey | OKPKey
FetchJson = Callable[[str], Awaitable[Mapping[str, Any]]]

_MAX_DOCUMENT = 512 * 1024
_TIMEOUT = aiohttp.ClientTimeout(total=10.0)


class ProviderUnavailable(Exception):
    """The issuer could not be used (no answer, an error status, a bad document); the
    message names the URL and what went wrong, never a token."""


async def get_json(url: str) -> Mapping[str, Any]:
    """``url``'s JSON object (bounded, no redirects, no environment proxies)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=_TIMEOUT, trust_env=False) as session,
            session.get(
                url, allow_redirects=False, headers={"accept": "application/json"}
            ) as answer,
        ):
            body = await answer.content.read(_MAX_DOCUMENT + 1)
            status = answer.status
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise ProviderUnavailable(f"{url} did not answer ({type(exc).__name__})") from None
    if status != 200:
        raise ProviderUnavailable(f"{url} answered {status}")
    if len(body) > _MAX_DOCUMENT:
        raise ProviderUnavailable(f"{url} answered more than {_MAX_DOCUMENT} bytes")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ProviderUnavailable(f"{url} did not answer JSON") from None
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"{url} did not answer a JSON object")
    return document


class KeySource:
    """The signing keys of ``issuer`` (see the module docstring).

    ``on_fetch()`` is called for every key-set fetch (for a metric).
    """

    def __init__(
        self,
        issuer: str,
        *,
        jwks_url: str | None,
        min_refresh: float,
        clock: Clock,
        fetch: FetchJson = get_json,
        on_fetch: Callable[[], None] = lambda: None,
    ) -> None:
        self.issuer = issuer
        self._jwks_url = jwks_url
        self._min_refresh = min_refresh
        self._clock = clock
        self._fetch = fetch
        self._on_fetch = on_fetch
        self._keys: dict[str, PublicKey] = {}
        self._anonymous: list[PublicKey] = []  # keys without a kid
        self._loaded = False
        self._fetched_at: float | None = None
        self._pending: asyncio.Future[None] | None = None

    @property
    def ready(self) -> bool:
        """Whether a key set was read at least once."""
        return self._loaded

    async def start(self) -> None:
        """Discovery (unless ``jwks_url`` is set) and the first key set; raises
        ``ProviderUnavailable`` when the issuer does not answer."""
        await self._refresh()

    async def key(self, kid: str | None) -> PublicKey | None:
        """The key ``kid`` names (a token without a kid: the only key without one, or
        the only key), fetching the set again when it lacks it and may be fetched."""
        found = self._find(kid)
        if found is not None:
            return found
        if self._pending is not None:
            await asyncio.shield(self._pending)
            return self._find(kid)
        fetched = self._fetched_at
        if fetched is not None and self._clock.monotonic() - fetched < self._min_refresh:
            return None
        try:
            await self._refresh()
        except ProviderUnavailable as exc:
            log.warning("jwt: the key set of %s could not be read: %s", self.issuer, exc)
            return None
        return self._find(kid)

    def _find(self, kid: str | None) -> PublicKey | None:
        if kid is not None:
            return self._keys.get(kid)
        if len(self._anonymous) == 1:
            return self._anonymous[0]
        if not self._anonymous and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return None

    async def _refresh(self) -> None:
        """One fetch, shared by everyone who asks while it runs."""
        if self._pending is not None:
            await asyncio.shield(self._pending)
            return
        self._pending = asyncio.get_running_loop().create_future()
        self._fetched_at = self._clock.monotonic()
        try:
            url = self._jwks_url or await self._discover()
            self._on_fetch()
            self._load(await self._fetch(url), url)
        finally:
            self._pending.set_result(None)
            self._pending = None

    async def _discover(self) -> str:
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        document = await self._fetch(url)
        if document.get("issuer") != self.issuer:
            raise ProviderUnavailable(f"{url} names another issuer")
        jwks = document.get("jwks_uri")
        if not isinstance(jwks, str):
            raise ProviderUnavailable(f"{url} has no jwks_uri")
        try:
            self._jwks_url = secure_url(jwks, "jwks_uri")
        except ValueError as exc:
            raise ProviderUnavailable(f"{url}: {exc}") from None
        return self._jwks_url

    def _load(self, document: Mapping[str, Any], url: str) -> None:
        entries = document.get("keys")
        if not isinstance(entries, list):
            raise ProviderUnavailable(f"{url} is not a key set")
        keys: dict[str, PublicKey] = {}
        anonymous: list[PublicKey] = []
        for entry in entries:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            if entry.get("kty") not in ("RSA", "EC", "OKP") or "d" in entry:
                continue  # never a symmetric key, never a private one
            try:
                imported = KeySet.import_key_set({"keys": [entry]}).keys[0]
            except (JoseError, ValueError, TypeError, KeyError):
                log.info("jwt: a key of %s could not be read and is skipped", url)
                continue
            if not isinstance(imported, RSAKey | ECKey | OKPKey):
                continue
            kid = entry.get("kid")
            if isinstance(kid, str):
                keys[kid] = imported
            else:
                anonymous.append(imported)
        if not keys and not anonymous:
            # no token could be verified with it: a provider's fault (a broken deploy, an
            # error page in JSON), not a rotation; the keys known so far stay
            raise ProviderUnavailable(f"{url} holds no usable signing key")
        self._keys, self._anonymous, self._loaded = keys, anonymous, True
