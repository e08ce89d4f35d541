"""Virtual keys and admin tokens: how they are made, hashed, compared and recognised.

A secret is a prefix and 256 random bits from the operating system's CSPRNG
(``secrets.token_bytes``), base64url-encoded without padding:

    fg-  + 43 characters    a virtual key (client API)
    fga- + 43 characters    an admin token (admin API)

Only its SHA-256 is stored (HMAC-SHA-256 with ``auth.key_pepper_file``: see
``fairgate.auth.pepper``). A fast hash is right here, unlike for passwords: 256
random bits cannot be guessed, so a slow hash would only slow every request.
The display prefix (``fg-`` and the next 8 characters, 48 of the 256 bits) is
what listings show; it identifies a key to its owner and leaves 208 bits unknown.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

__all__ = [
    "ADMIN_TOKEN_PREFIX",
    "KEY_PREFIX",
    "PREFIX_CHARS",
    "bearer_credential",
    "constant_time_equal",
    "looks_like_key",
    "new_admin_token",
    "new_key",
    "sha256",
]

KEY_PREFIX = "fg-"
ADMIN_TOKEN_PREFIX = "fga-"  # noqa: S105 - a public prefix, not a secret
PREFIX_CHARS = 8
"""Characters after the prefix kept for display (``fg-AbCdEfGh``)."""

_RANDOM_BYTES = 32
_ENCODED_CHARS = 43  # ceil(256 / 6)
_KEY_PREFIX_CHARS = len(KEY_PREFIX)
_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
# 43 characters carry 258 bits; the last character of a canonical encoding of 32
# bytes has its two low bits zero, so only these 16 characters can end a secret.
_LAST = frozenset("AEIMQUYcgkosw048")


def new_key() -> tuple[str, bytes, str]:
    """A new virtual key: ``(secret, sha256(secret), display prefix)``.

    The secret is shown to its owner once and never stored; the digest is what
    the store keeps; the prefix (``fg-`` + 8 characters) is what listings show.
    """
    return _new(KEY_PREFIX)


def new_admin_token() -> tuple[str, bytes, str]:
    """A new admin token (``fga-…``): ``(secret, sha256(secret), display prefix)``."""
    return _new(ADMIN_TOKEN_PREFIX)


def sha256(secret: str) -> bytes:
    """The 32-byte SHA-256 digest of ``secret`` (UTF-8), as stored and looked up.

    Never raises: a lone surrogate, which no HTTP header can carry, is hashed as is.
    """
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def constant_time_equal(a: bytes, b: bytes) -> bool:
    """``a == b`` in a time that does not depend on where they first differ."""
    return hmac.compare_digest(a, b)


def bearer_credential(authorization: bytes | None) -> str | None:
    """The credential of an ``Authorization: Bearer <credential>`` header, or None.

    One reading for every door (client API, metrics token), so a credential
    one of them accepts is never spelled differently at another.
    """
    if not authorization:
        return None
    scheme, _, credential = authorization.partition(b" ")
    credential = credential.strip(b" \t")
    if scheme.lower() != b"bearer" or not credential:
        return None
    return credential.decode("latin-1")


def looks_like_key(s: str, *, prefix: str = KEY_PREFIX) -> bool:
    """Whether ``s`` has the exact shape of a secret made by this module.

    ``prefix`` then 43 base64url characters in canonical encoding. A cheap
    refusal of junk before hashing and before any lookup: it says nothing about
    whether such a key exists.
    """
    skip = _KEY_PREFIX_CHARS if prefix is KEY_PREFIX else len(prefix)
    return (
        len(s) == skip + _ENCODED_CHARS
        and s.startswith(prefix)
        and s[-1] in _LAST
        and _ALPHABET.issuperset(s[skip:])
    )


def _new(prefix: str) -> tuple[str, bytes, str]:
    encoded = base64.urlsafe_b64encode(secrets.token_bytes(_RANDOM_BYTES)).rstrip(b"=")
    secret = prefix + encoded.decode("ascii")
    return secret, sha256(secret), secret[: len(prefix) + PREFIX_CHARS]
