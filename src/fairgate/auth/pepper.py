"""How secrets are hashed for the store: SHA-256, or HMAC-SHA-256 with a pepper.

    no pepper       stored = SHA-256(secret)
    with a pepper   stored = HMAC-SHA-256(pepper, secret)

The pepper (``auth.key_pepper_file``, at least 32 bytes) lives outside the
database, so a copy of the database alone cannot be used to check a guessed or
leaked secret, and a digest taken from it matches nothing without the pepper.
Keys and admin tokens stored before the pepper was set keep their plain digest
until their next successful use, when the caller re-hashes the row
(``legacy`` is the digest to look for meanwhile). Losing the pepper, or changing
it, locks out every secret already re-hashed with it.

One HMAC costs about as much as one SHA-256 of a 46-byte secret (both well under
a microsecond): ``hmac.digest`` is OpenSSL's one-shot HMAC.
"""

from __future__ import annotations

import hmac

from fairgate.auth.secrets import sha256

__all__ = ["MIN_PEPPER_BYTES", "KeyHasher"]

MIN_PEPPER_BYTES = 32


class KeyHasher:
    """``digest(secret)``: what the store keeps for ``secret``; ``legacy(secret)``: the plain
    SHA-256 a row stored before the pepper holds, or None without a pepper.

    Raises ``ValueError`` for a pepper shorter than 32 bytes (the message gives its
    length, never its content).
    """

    __slots__ = ("_pepper",)

    def __init__(self, pepper: bytes | None = None) -> None:
        if pepper is not None and len(pepper) < MIN_PEPPER_BYTES:
            raise ValueError(
                f"the key pepper must be at least {MIN_PEPPER_BYTES} bytes (it has {len(pepper)})"
            )
        self._pepper = pepper

    @property
    def peppered(self) -> bool:
        return self._pepper is not None

    def digest(self, secret: str) -> bytes:
        if self._pepper is None:
            return sha256(secret)
        return hmac.digest(self._pepper, secret.encode("utf-8", "surrogatepass"), "sha256")

    def legacy(self, secret: str) -> bytes | None:
        return None if self._pepper is None else sha256(secret)

    def __repr__(self) -> str:
        return "KeyHasher(peppered)" if self._pepper is not None else "KeyHasher(sha256)"
