"""Tenant prefix-cache isolation: the ``cache_salt`` the gateway gives each request.

vLLM shares cached prefix blocks only between requests with the same
``cache_salt``; timing the answers to a guessed prompt would otherwise tell one
tenant what another sent. The gateway removes any client ``cache_salt`` (the
vLLM adapter strips it) and sets

    base64url(HMAC-SHA256(key, "<scope kind>:<name>"))      no padding

for the configured scope: ``org`` (default; an organisation's teams share
their cached prefixes), ``team``, ``key``, or ``none`` (no salt: every tenant
shares the cache). The HMAC key comes from a file, so every gateway process
derives the same salt for the same tenant, and a salt says nothing about the
tenant's name.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Literal

from fairgate.core.principal import Principal

__all__ = ["CacheSalter"]

Scope = Literal["org", "team", "key", "none"]

_MAX_CACHED = 100_000


class CacheSalter:
    """``salter(principal)`` → the request's salt, or None with scope ``none``.

    Salts are memoised per tenant (at most 100,000 held; the memo is cleared
    past that), so the HMAC runs once per tenant, not once per request.
    """

    def __init__(self, scope: Scope, key: bytes) -> None:
        if scope != "none" and not key:
            raise ValueError("cache isolation needs a non-empty HMAC key")
        self.scope = scope
        self._key = key
        self._memo: dict[str, str] = {}

    def rekey(self, key: bytes) -> None:
        """Salt with ``key`` from now on (a key rotated in a vault): every salt changes."""
        if self.scope != "none" and not key:
            raise ValueError("cache isolation needs a non-empty HMAC key")
        self._key = key
        self._memo = {}

    def __call__(self, principal: Principal | None) -> str | None:
        if self.scope == "none" or principal is None:
            return None
        if self.scope == "org":
            name = "org:" + principal.org
        elif self.scope == "team":
            name = f"team:{principal.org}/{principal.team}"
        else:
            name = "key:" + principal.key_id
        salt = self._memo.get(name)
        if salt is None:
            if len(self._memo) >= _MAX_CACHED:
                self._memo.clear()
            digest = hmac.new(self._key, name.encode(), hashlib.sha256).digest()
            salt = self._memo[name] = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        return salt
