"""Caller credentials: virtual keys, the key cache, the failure limiter, the Authenticator.

One request, ``Authorization: Bearer fg-…`` from client address A:

    shape check ──junk──▶ 401
        │ SHA-256
    hit cache ──valid──▶ Principal          (no store, no failure limit)
        │
    failure limiter(A) ──over──▶ 429 + Retry-After   (before any lookup)
        │
    miss cache ──present──▶ 401, failure counted
        │
    KeyDirectory.find_key ──StoreUnavailable──▶ 503 (not cached, not counted)
        │
    unknown / revoked / expired / grace over ──▶ 401 (same bytes), miss cached, failure counted
    valid ──▶ Principal, hit cached

Errors raised here (``fairgate.core.errors``)::

    GatewayError
    ├── Unauthorized         401  missing header; any refused key (one body for all)
    ├── RateLimited          429  the client network failed too often (retry_after)
    └── ServiceUnavailable   503  the key store could not answer
    StoreUnavailable              raised by a KeyDirectory; never leaves the Authenticator

docs/auth.md describes the flow, the cache and the revocation delay.
"""

from fairgate.auth.allowlist import ModelResolver, allowed_models, allows
from fairgate.auth.authenticator import Authenticator
from fairgate.auth.cache import Grant, KeyCache
from fairgate.auth.directory import KeyDirectory
from fairgate.auth.failures import FailureLimiter
from fairgate.auth.secrets import (
    ADMIN_TOKEN_PREFIX,
    KEY_PREFIX,
    constant_time_equal,
    looks_like_key,
    new_admin_token,
    new_key,
    sha256,
)

__all__ = [
    "ADMIN_TOKEN_PREFIX",
    "KEY_PREFIX",
    "Authenticator",
    "FailureLimiter",
    "Grant",
    "KeyCache",
    "KeyDirectory",
    "ModelResolver",
    "allowed_models",
    "allows",
    "constant_time_equal",
    "looks_like_key",
    "new_admin_token",
    "new_key",
    "sha256",
]
