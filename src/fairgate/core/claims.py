"""Whether a token's claim holds a value: the one rule of the ``jwt:`` block's ``map:``
and the ``sso:`` block's ``role:`` bindings.

A claim holds a value when it is that string, or a list with that string among its
items; any other type (a number, an object, null) holds nothing. ``email`` holds
nothing unless the same token says ``email_verified: true``: a provider that lets
people type their own address would otherwise let anyone claim a binding made for
someone else's (the person's name follows the same rule).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["claim_holds"]


def claim_holds(claims: Mapping[str, object], name: str, value: str) -> bool:
    claim = claims.get(name)
    if name == "email" and claims.get("email_verified") is not True:
        return False
    if isinstance(claim, str):
        return claim == value
    if isinstance(claim, list):
        return any(isinstance(item, str) and item == value for item in claim)
    return False
