"""The OpenID provider as the gateway sees it: its discovery document and its signing keys.

    provider = Provider(issuer)
    meta = await provider.metadata()        # fetched once, then kept
    keys = await provider.keys(kid)         # the JWKS; fetched again for an unknown kid,
                                            # at most once per REFRESH seconds

Discovery happens at the first sign-in, not at start-up, so a provider that is
down stops single sign-on only (the master key and admin tokens still work) and
the next sign-in tries again. The document's ``issuer`` must be the configured
one, whole (OpenID Connect Discovery §4.3), and every endpoint it names must be
https (http only on a loopback host). Requests follow no redirect and ignore
proxy variables of the environment.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from fairgate.config.sso import secure_url

__all__ = ["Metadata", "Provider", "ProviderError"]

REFRESH = 60.0
"""Seconds between two key-set fetches caused by unknown ``kid`` values."""

_TIMEOUT = httpx.Timeout(10.0)
_MAX_DOCUMENT = 512 * 1024


class ProviderError(Exception):
    """The provider could not be used (unreachable, a bad document); the message names
    what, never a secret."""


@dataclass(frozen=True, slots=True)
class Metadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str | None
    end_session_endpoint: str | None


def http_client() -> httpx.AsyncClient:
    """A client for the provider: bounded time, no redirects, no environment proxies."""
    return httpx.AsyncClient(timeout=_TIMEOUT, follow_redirects=False, trust_env=False)


async def get_json(url: str) -> Mapping[str, object]:
    """``url``'s JSON object, or ProviderError."""
    try:
        async with http_client() as client:
            answer = await client.get(url, headers={"accept": "application/json"})
    except httpx.HTTPError as exc:
        raise ProviderError(f"{url} did not answer: {type(exc).__name__}") from None
    if answer.status_code != 200 or len(answer.content) > _MAX_DOCUMENT:
        raise ProviderError(f"{url} answered {answer.status_code}")
    try:
        document = answer.json()
    except ValueError:
        raise ProviderError(f"{url} did not answer JSON") from None
    if not isinstance(document, dict):
        raise ProviderError(f"{url} did not answer a JSON object")
    return document


class Provider:
    """Discovery and keys of one issuer (see the module docstring)."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer
        self._metadata: Metadata | None = None
        self._keys: KeySet | None = None
        self._fetched_at = -REFRESH
        self._lock = asyncio.Lock()

    async def metadata(self) -> Metadata:
        if self._metadata is None:
            url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
            self._metadata = _metadata(await get_json(url), self.issuer)
        return self._metadata

    async def keys(self, kid: str | None) -> KeySet:
        """The key set, fetched again when it lacks ``kid`` and the last fetch is older
        than REFRESH seconds (so a flood of unknown kids costs one fetch a minute)."""
        async with self._lock:
            if self._keys is None or (not _has(self._keys, kid) and self._stale()):
                meta = await self.metadata()
                self._fetched_at = time.monotonic()
                try:
                    self._keys = KeySet.import_key_set(await get_json(meta.jwks_uri))  # type: ignore[arg-type]
                except (JoseError, ValueError, TypeError) as exc:
                    raise ProviderError(f"{meta.jwks_uri}: not a key set ({exc})") from None
            return self._keys

    def _stale(self) -> bool:
        return time.monotonic() - self._fetched_at >= REFRESH


def _has(keys: KeySet, kid: str | None) -> bool:
    return kid is None or any(key.kid == kid for key in keys.keys)


def _metadata(document: Mapping[str, object], issuer: str) -> Metadata:
    if document.get("issuer") != issuer:
        raise ProviderError("the discovery document names another issuer")
    urls: dict[str, str | None] = {}
    for name, required in (
        ("authorization_endpoint", True),
        ("token_endpoint", True),
        ("jwks_uri", True),
        ("userinfo_endpoint", False),
        ("end_session_endpoint", False),
    ):
        value = document.get(name)
        if value is None and not required:
            urls[name] = None
            continue
        if not isinstance(value, str):
            raise ProviderError(f"the discovery document has no {name}")
        try:
            urls[name] = secure_url(value, name)
        except ValueError as exc:
            raise ProviderError(str(exc)) from None
    return Metadata(issuer=issuer, **urls)  # type: ignore[arg-type]
