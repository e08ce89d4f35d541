"""The ``map:`` rules: a verified token's claims → the team (and project) of its person.

The rules are tried in order and the first whose claim holds its value decides:
a claim holds a value when it is that string, or a list with that string among
its items (other types hold nothing). A token no rule matches is refused
(``unmapped``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fairgate.core.claims import claim_holds

__all__ = ["Placement", "Rule", "person_key_id", "place"]


class Rule(Protocol):
    """One ``map:`` entry (``fairgate.config.jwt.JwtMap`` has these fields)."""

    @property
    def claim(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def team(self) -> str: ...
    @property
    def project(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Placement:
    team: str
    project: str | None


def place(rules: Sequence[Rule], claims: Mapping[str, Any]) -> Placement | None:
    """The first rule's team and project whose claim holds its value; None if none does."""
    for rule in rules:
        if claim_holds(claims, rule.claim, rule.value):
            return Placement(rule.team, rule.project)
    return None


def person_key_id(issuer: str, subject: str) -> str:
    """The stable key id of a person: ``jwt-`` and 22 hex digits of SHA-256(issuer, subject).

    The two are length-prefixed, so no (issuer, subject) pair shares another's input."""
    data = b"%d:%s%d:%s" % (
        len(issuer.encode()),
        issuer.encode(),
        len(subject.encode()),
        subject.encode(),
    )
    return "jwt-" + hashlib.sha256(data).hexdigest()[:22]
