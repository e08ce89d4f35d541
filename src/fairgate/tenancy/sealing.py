"""Sealing a key's secret for a claim link: only the link's token opens it.

    token, raw = new_token()              # 256 random bits; the text goes in the URL only
    row_lookup = lookup_of(raw)           # what the store keeps to find the link
    row_sealed = seal(raw, secret, key_id=key.id)
    unseal(raw, row_sealed, key_id=key.id)   # the secret, or None

Two values are derived from the token, under two different labels, and only one
of them is ever stored:

    lookup  = SHA-256("fairgate claim-link lookup v1" ‖ token)            stored
    sealing = HKDF-SHA-256(token, salt=none, info="fairgate claim-link seal v1")   never stored
    sealed  = nonce(12 random bytes) ‖ AES-256-GCM(sealing, nonce, secret, aad=key id)

So the database holds the lookup and the sealed bytes, and neither the lookup nor
anything else in it is the sealing key: a leaked row opens nothing. The key id as
associated data means a sealed secret moved onto another key's row does not open
there. The token has 256 bits from the operating system's CSPRNG, so a fast hash
is right for the lookup (nothing to guess), as for API keys (``fairgate.auth.secrets``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["TOKEN_CHARS", "lookup_of", "new_token", "parse_token", "seal", "unseal"]

TOKEN_CHARS = 43
"""Length of a token as written in a link: 32 bytes, base64url without padding."""

_TOKEN_BYTES = 32
_NONCE_BYTES = 12
_LOOKUP_LABEL = b"fairgate claim-link lookup v1\x00"
_SEAL_INFO = b"fairgate claim-link seal v1"


def new_token() -> tuple[str, bytes]:
    """A new link token: ``(text for the URL, the 32 raw bytes)``."""
    raw = secrets.token_bytes(_TOKEN_BYTES)
    return _encode(raw), raw


def parse_token(text: str) -> bytes | None:
    """The raw bytes of a token as written in a link; None for anything that is not
    exactly the canonical encoding of 32 bytes (no database lookup is worth doing)."""
    if len(text) != TOKEN_CHARS or not text.isascii():
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=")
    except ValueError:
        return None
    if len(raw) != _TOKEN_BYTES or _encode(raw) != text:
        return None
    return raw


def lookup_of(raw: bytes) -> bytes:
    """What the store keeps to find a link: a SHA-256 of the token under its own label."""
    return hashlib.sha256(_LOOKUP_LABEL + raw).digest()


def seal(raw: bytes, secret: str, *, key_id: str) -> bytes:
    """``secret`` sealed under the key the token derives, bound to ``key_id``."""
    nonce = os.urandom(_NONCE_BYTES)
    return nonce + AESGCM(_sealing_key(raw)).encrypt(nonce, secret.encode(), key_id.encode())


def unseal(raw: bytes, sealed: bytes, *, key_id: str) -> str | None:
    """The secret sealed by :func:`seal` with this token and key id, else None (another
    token, another key id, or bytes changed since sealing)."""
    nonce, body = sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:]
    try:
        plain = AESGCM(_sealing_key(raw)).decrypt(nonce, body, key_id.encode())
    except (InvalidTag, ValueError):
        return None
    return plain.decode()


def _sealing_key(raw: bytes) -> bytes:
    return HKDF(algorithm=SHA256(), length=32, salt=None, info=_SEAL_INFO).derive(raw)


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
