"""Who signed in and what their claims give: the person's name and the ``sso.role`` bindings.

    person_of({"preferred_username": "ada", "sub": "1f3…"})        -> "ada"
    person_of({"email": "ada@x.org", "email_verified": True, ...})  -> "ada@x.org"
    claim_roles(claims, config.sso.role)                            -> (SsoBinding, ...)

The name is ``preferred_username``, else a verified ``email``, else ``sub``; it is
also the name of the store user whose role bindings join the claims' (so a user
created by hand, or by SCIM, under that name holds their roles through SSO too).
Every ``role`` entry whose claim holds its value applies (a string claim equal to
the value, or a list of strings containing it); the same binding twice counts once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fairgate.accounts import SsoBinding
from fairgate.config.sso import SsoRole
from fairgate.core.claims import claim_holds

__all__ = ["MAX_PERSON", "claim_roles", "person_of"]

MAX_PERSON = 190
"""Longest person name kept (the session's actor column holds 200 with its prefix)."""


def person_of(claims: Mapping[str, object]) -> str | None:
    """The person's name from verified claims, or None when no usable one is there."""
    candidates: list[object] = [claims.get("preferred_username")]
    if claims.get("email_verified") is True:
        candidates.append(claims.get("email"))
    candidates.append(claims.get("sub"))
    for value in candidates:
        if isinstance(value, str) and _usable(value):
            return value
    return None


def _usable(name: str) -> bool:
    return 0 < len(name) <= MAX_PERSON and name == name.strip() and name.isprintable()


def claim_roles(claims: Mapping[str, object], rules: Sequence[SsoRole]) -> tuple[SsoBinding, ...]:
    """The bindings of every rule whose claim holds its value, in rule order, without repeats."""
    found: list[SsoBinding] = []
    for rule in rules:
        if not claim_holds(claims, rule.claim, rule.value):
            continue
        binding = SsoBinding(role=rule.role, org=rule.org, team=rule.team)
        if binding not in found:
            found.append(binding)
    return tuple(found)
