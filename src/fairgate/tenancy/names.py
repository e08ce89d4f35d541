"""Names of organisations, teams, projects, users and keys: what the store accepts.

A name is 1 to 128 characters of letters, digits and ``_ . - @ +`` (users may be
e-mail addresses); it cannot start with a dot or a dash and never holds ``/``,
which separates ``team/project`` in listings and budgets. Model names in
allowlists and tags follow the configuration's looser rule (any printable text
without surrounding spaces).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fairgate.store.tables import NAME_LENGTH
from fairgate.tenancy.errors import BadRequest

__all__ = ["check_labels", "check_name"]

_NAME = re.compile(r"[A-Za-z0-9_@+][A-Za-z0-9_.@+-]*")
_LABEL = re.compile(r"[^\s\x00-\x1f\x7f](?:[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?")


def check_name(kind: str, value: str) -> str:
    """``value`` if it is a valid name for a ``kind`` (org, team…); BadRequest otherwise."""
    if not 1 <= len(value) <= NAME_LENGTH or not _NAME.fullmatch(value):
        raise BadRequest(
            f"invalid {kind} name {value[:NAME_LENGTH]!r}: use 1-{NAME_LENGTH} letters, digits "
            "and _ . - @ +, not starting with . or -",
            code="invalid_name",
        )
    return value


def check_labels(kind: str, values: Iterable[str], *, most: int = 64) -> tuple[str, ...]:
    """Model names or tags: printable, no surrounding spaces, at most ``most``, no repeats."""
    seen: list[str] = []
    for value in values:
        if not 1 <= len(value) <= 256 or not _LABEL.fullmatch(value):
            raise BadRequest(f"invalid {kind} {value[:256]!r}", code="invalid_name")
        if value not in seen:
            seen.append(value)
    if len(seen) > most:
        raise BadRequest(f"at most {most} {kind}s", code="too_many")
    return tuple(seen)
