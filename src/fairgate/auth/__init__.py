"""Caller credentials: virtual keys, the key cache, the listener's guard, the Authenticator.

One request, ``Authorization: Bearer fg-…`` from client address A:

    shape check ──junk──▶ 401
        │ SHA-256
    hit cache ──valid──▶ Principal          (no store, no failure limit)
        │
    miss cache ──present──▶ 401 (429 once A's network is over its limits), failure counted
        │
    known valid (expired hit) ──▶ store lookup, outside the guard
        │
    guard(A): failure limits of A's network and aggregates + lookup ceiling
        │ ──refused──▶ 429 + Retry-After   (no lookup)
    KeyDirectory.find_key ──StoreUnavailable──▶ 503 (not cached, not counted)
        │
    unknown / revoked / expired / grace over ──▶ 401 (429 once over its limits),
        │                                        miss cached, failure counted
    valid ──▶ Principal, hit cached         (whatever A's failure count)

Every process also runs a ``ChangeWatcher``: it reads the store's access-change
feed (every ``auth.change_poll_interval``, at once on NOTIFY or a Redis message)
and drops the cached keys each change names, so revocations, rotations and
disabled teams take effect everywhere within that interval.

Each listener has its own guard (``AuthGuard`` = ``FailureLimiter`` +
``LookupCeiling``); the admin listener uses its own through
``fairgate.admin``.

Errors raised here (``fairgate.core.errors``)::

    GatewayError
    ├── Unauthorized         401  missing header; any refused key (one body for all)
    ├── RateLimited          429  the guard refused a lookup, or a refused key from a
    │                             network over its limits (retry_after)
    └── ServiceUnavailable   503  the key store could not answer
    StoreUnavailable              raised by a KeyDirectory; never leaves the Authenticator

docs/auth.md describes the flow, the cache and the revocation delay.
"""

from fairgate.auth.allowlist import ModelResolver, allowed_models, allows
from fairgate.auth.authenticator import Authenticator, invalid_credential
from fairgate.auth.cache import Grant, KeyCache
from fairgate.auth.ceiling import LookupCeiling, Slot
from fairgate.auth.changes import Change, ChangeFeed, ChangeWatcher, Waker
from fairgate.auth.directory import KeyDirectory
from fairgate.auth.failures import FailureLimiter
from fairgate.auth.guard import AuthGuard, AuthObserver, Refusal
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
    "AuthGuard",
    "AuthObserver",
    "Authenticator",
    "Change",
    "ChangeFeed",
    "ChangeWatcher",
    "FailureLimiter",
    "Grant",
    "KeyCache",
    "KeyDirectory",
    "LookupCeiling",
    "ModelResolver",
    "Refusal",
    "Slot",
    "Waker",
    "allowed_models",
    "allows",
    "constant_time_equal",
    "invalid_credential",
    "looks_like_key",
    "new_admin_token",
    "new_key",
    "sha256",
]
