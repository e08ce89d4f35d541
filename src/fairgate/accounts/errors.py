"""What the accounts package raises; the web pages and the CLI render each.

GatewayError (fairgate.core.errors)
├── PasswordRejected   400  a password outside 12..1024 characters
├── EmailRejected      400  not an e-mail address the gateway accepts
├── SignInRefused      401  wrong password, no account, pending or suspended: one reason
├── TooManyGuesses     429  the address or the network made too many guesses (retry_after)
├── VerifierBusy       503  every verification thread busy and the wait queue full
├── NotFound           404  (fairgate.core.errors) no account with that address
└── Conflict           409  (fairgate.tenancy.errors) the account cannot move that way
"""

from __future__ import annotations

from fairgate.core.errors import BadRequest, RateLimited, ServiceUnavailable, Unauthorized

__all__ = [
    "EmailRejected",
    "PasswordRejected",
    "SignInRefused",
    "TooManyGuesses",
    "VerifierBusy",
]


class PasswordRejected(BadRequest):
    """The password's length is outside 12..1024 characters (the only rule)."""


class EmailRejected(BadRequest):
    """The address is not ``local@domain.tld`` in letters, digits and ``_ . - +``, ≤ 128."""


class SignInRefused(Unauthorized):
    """The same refusal for every reason, so a caller learns nothing about the address."""

    def __init__(self) -> None:
        super().__init__("wrong e-mail address or password", code="sign_in_refused")


class TooManyGuesses(RateLimited):
    """Too many failed sign-ins for the address or from the network; ``retry_after`` seconds
    (sent as ``Retry-After``)."""

    retry_after: float

    def __init__(self, retry_after: float) -> None:
        super().__init__(
            "too many sign-in attempts; try again later",
            code="too_many_guesses",
            retry_after=retry_after,
        )


class VerifierBusy(ServiceUnavailable):
    """Every password-hashing thread is busy and the wait queue is full: try again soon."""

    def __init__(self) -> None:
        super().__init__("sign-in is busy; try again in a moment", code="verifier_busy")
