"""The ``accounts:`` section: password hashing, the verification pool, sessions, guess limits.

The argon2id parameters cannot be set below OWASP's recommendation (19 MiB, 2
iterations, parallelism 1); raising them rehashes each password at its next
sign-in.
"""

from __future__ import annotations

from pydantic import Field, StrictInt, ValidationInfo, field_validator

from fairgate.config.fields import PositiveDuration, Section

__all__ = ["WebAccounts"]

OWASP_MEMORY_KIB = 19 * 1024
OWASP_ITERATIONS = 2


class WebAccounts(Section):
    """Web accounts (sign-up, sign-in, sessions); durations in seconds.

    ``verify_threads`` password verifications run at once and ``verify_queue``
    more may wait; past that, sign-in answers 503 at once. Guesses (failed
    sign-ins) are counted per address and per client network over
    ``guess_window``; past either limit, sign-in answers 429. Sign-ups are limited
    per network over the same window (``signups_per_network``).
    """

    argon2_memory_kib: StrictInt = Field(default=OWASP_MEMORY_KIB, ge=OWASP_MEMORY_KIB, le=4 << 20)
    argon2_iterations: StrictInt = Field(default=OWASP_ITERATIONS, ge=OWASP_ITERATIONS, le=64)
    argon2_parallelism: StrictInt = Field(default=1, ge=1, le=64)
    verify_threads: StrictInt = Field(default=2, ge=1, le=64)
    verify_queue: StrictInt = Field(default=16, ge=0, le=10_000)
    session_idle: PositiveDuration = 30 * 60.0
    session_lifetime: PositiveDuration = 12 * 3600.0
    guess_window: PositiveDuration = 15 * 60.0
    guesses_per_address: StrictInt = Field(default=10, ge=1, le=1_000_000)
    guesses_per_network: StrictInt = Field(default=100, ge=1, le=1_000_000)
    signups_per_network: StrictInt = Field(default=10, ge=1, le=1_000_000)

    @field_validator("session_lifetime")
    @classmethod
    def _not_below_idle(cls, value: float, info: ValidationInfo) -> float:
        idle = info.data.get("session_idle")
        if isinstance(idle, float) and value < idle:
            raise ValueError("must not be shorter than accounts.session_idle")
        return value
