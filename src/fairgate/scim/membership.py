"""Who holds which mapped role: a group's members with its nested groups' members, expanded.

    groups = {"g1": Group("Physics", ("u1", "g2")), "g2": Group("Optics", ("u2",))}
    holders(groups, {"physics": ("member", "etabA")})  ->  {"u1": {("member", "etabA")},
                                                          "u2": {("member", "etabA")}}

A member id naming another group brings that group's members, however deep and
whatever cycles the provider's groups form (each group is walked once per mapped
group). Names compare case-folded. Pure: no I/O, ids in, ids out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Group", "holders"]

Pair = tuple[str, str]
"""``(role, team name)``: what a mapped group gives its members."""


@dataclass(frozen=True, slots=True)
class Group:
    """A provisioned group: its display name and the ids of its members (users or groups)."""

    name: str
    members: tuple[str, ...]


def holders(groups: Mapping[str, Group], mapping: Mapping[str, Pair]) -> dict[str, set[Pair]]:
    """Every member id (users, and group ids, which callers ignore) -> the pairs it holds
    through the mapped groups (``mapping`` keyed by case-folded display name)."""
    held: dict[str, set[Pair]] = {}
    for group_id, group in groups.items():
        pair = mapping.get(group.name.casefold())
        if pair is None:
            continue
        for member in _expanded(groups, group_id):
            held.setdefault(member, set()).add(pair)
    return held


def _expanded(groups: Mapping[str, Group], root: str) -> set[str]:
    """The ids reachable from ``root`` through its members, ``root`` itself excluded."""
    seen: set[str] = set()
    stack = [root]
    while stack:
        for member in groups[stack.pop()].members:
            if member in seen or member == root:
                continue
            seen.add(member)
            if member in groups:
                stack.append(member)
    return seen
