"""Password hashing with argon2id (argon2-cffi): the only place a password is looked at.

    passwords = Passwords(memory_kib=19456, iterations=2, parallelism=1)
    stored = passwords.hash("correct horse battery")      # a PHC string with its parameters
    passwords.verify(stored, "correct horse battery")     # Verdict(ok=True, rehash=False)
    passwords.verify(None, "anything at all")             # the dummy hash: Verdict(ok=False)

Both calls are CPU-heavy on purpose (about 30 ms at the defaults) and blocking:
run them through :class:`fairgate.accounts.verifier.Verifier`, never on the
event loop. ``verify(None, …)`` verifies against a dummy hash made with the same
parameters, so a missing account costs the same work as a wrong password.
``rehash`` is True when the stored hash was made with other parameters than
today's (the caller stores a new hash after a successful sign-in).

Length is the only rule: 12 to 1024 characters (``check_password``). The upper
bound keeps one hash from being an expensive request of its own.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError

from fairgate.accounts.errors import PasswordRejected

__all__ = ["MAX_PASSWORD", "MIN_PASSWORD", "Passwords", "Verdict", "check_password"]

MIN_PASSWORD = 12
MAX_PASSWORD = 1024


def check_password(password: str) -> str:
    """``password`` if its length is within 12..1024 characters; PasswordRejected otherwise."""
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise PasswordRejected(
            f"a password has {MIN_PASSWORD} to {MAX_PASSWORD} characters", code="invalid_password"
        )
    return password


@dataclass(frozen=True, slots=True)
class Verdict:
    """``ok``: the password matches; ``rehash``: it does, and the stored hash is outdated."""

    ok: bool
    rehash: bool = False


class Passwords:
    """argon2id with the given cost; the dummy hash is made once, at construction."""

    def __init__(self, *, memory_kib: int, iterations: int, parallelism: int) -> None:
        self._hasher = PasswordHasher(
            time_cost=iterations,
            memory_cost=memory_kib,
            parallelism=parallelism,
            hash_len=32,
            salt_len=16,
            type=Type.ID,
        )
        self._dummy = self._hasher.hash(secrets.token_urlsafe(32))

    def hash(self, password: str) -> str:
        """A new salted hash of ``password`` (blocking, CPU-heavy)."""
        return self._hasher.hash(password)

    def verify(self, stored: str | None, password: str) -> Verdict:
        """Whether ``password`` matches ``stored``; None verifies against the dummy hash and
        is never ok. A malformed stored hash is a mismatch (blocking, CPU-heavy)."""
        try:
            self._hasher.verify(self._dummy if stored is None else stored, password)
        except (VerificationError, InvalidHashError):
            return Verdict(ok=False)
        if stored is None:
            return Verdict(ok=False)
        return Verdict(ok=True, rehash=self._hasher.check_needs_rehash(stored))
