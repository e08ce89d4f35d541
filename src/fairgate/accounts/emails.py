"""E-mail addresses of accounts: the one form accepted, lower-cased.

An address becomes a tenancy user's name once approved, so it must also be a
valid name there (``fairgate.tenancy.names``): letters, digits and ``_ . - +``
in the local part, a dotted domain, 128 characters at most. Lower-casing makes
``Alice@Example.org`` and ``alice@example.org`` one account (real mail systems
treat local parts case-insensitively in practice).
"""

from __future__ import annotations

import re

from fairgate.accounts.errors import EmailRejected
from fairgate.store.tables import EMAIL_LENGTH

__all__ = ["normalise_email"]

_ADDRESS = re.compile(
    r"[a-z0-9_+][a-z0-9_.+-]*@[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+"
)


def normalise_email(text: str) -> str:
    """The address lower-cased and stripped of surrounding spaces; EmailRejected otherwise."""
    address = text.strip().lower()
    if len(address) > EMAIL_LENGTH or not _ADDRESS.fullmatch(address):
        raise EmailRejected("enter a valid e-mail address", code="invalid_email")
    return address
