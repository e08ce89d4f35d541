"""Whether a token's claim holds a value: the one rule of the ``jwt:`` block's ``map:``
and the ``sso:`` block's ``role:`` bindings.

A claim holds a value when it is that string, or a list with that string among its
items; any other type (a number, an object, null) holds nothing.
"""

from __future__ import annotations

__all__ = ["claim_holds"]


def claim_holds(claim: object, value: str) -> bool:
    if isinstance(claim, str):
        return claim == value
    if isinstance(claim, list):
        return any(isinstance(item, str) and item == value for item in claim)
    return False
