"""Team sub-shares: an organisation's reservation split over its teams, ranked as a tree.

A team may carry a ``share``: a fraction of its organisation's share. The
organisation's reservation R is apportioned over those fractions with the same
Hamilton method as the pool over its organisations; what is left, the *rest*
(``REST``, the empty name, never a team's), is shared by the organisation's
teams without a share, exactly as the whole organisation is shared without
team shares (an organisation without team shares is one group, the rest):

    split(10, {"research": 0.7, "ops": 0.3})  == {"research": 7, "ops": 3, "": 0}
    split(10, {"research": 0.5})              == {"research": 5, "": 5}
    split(10, {})                             == {"": 10}

A request of team T (its group: T if T has a share, else ``REST``) is

    within its sub-reservation    group's own slots < group's reservation  priority 0/1
    borrowing in its organisation the organisation's slots < R              priority 2/3
    borrowing from the pool       otherwise                    10 + 10·rank + class

so a team within its sub-reservation outranks a sibling borrowing the
organisation's unused seats, which outranks every pool borrower.

Pool borrowers are ranked as Slurm's Fair Tree ranks them: the organisations by
their LF among the organisations, then, inside an organisation with team
shares, its groups by their LF among the organisation's groups (S = the team's
share of the organisation, U = the team's part of the organisation's usage);
the leaves in that depth-first order get dense ranks, capped at ``MAX_RANK``.
An organisation without team shares is one leaf, so with no team shares
anywhere the ranks are exactly the one-level ranks of ``tree.dense_ranks``.
Worked example: A (LF 2.0) with teams x 0.5 (LF +inf, no usage) and y 0.5
(LF 0.5), B (LF 0.5) without teams:

    order: A/x, A/y, B      ranks: A/x 0, A/y 1, B 2
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fairgate.fairshare.apportion import apportion
from fairgate.fairshare.tree import MAX_RANK, level_fairshare

__all__ = ["REST", "fair_tree_ranks", "group_levels", "split"]

REST = ""
"""The group of an organisation's teams without a share (no team is named ``""``)."""


def split(reservation: int, team_shares: Mapping[str, float]) -> dict[str, int]:
    """Sub-reservations of the teams with a share, and ``REST`` for what is left.

    ``team_shares`` are fractions of the organisation's share, each in [0, 1],
    summing to at most 1 (``ValueError`` otherwise, and for a team named
    ``REST``). The values sum to exactly ``reservation``.
    """
    if REST in team_shares:
        raise ValueError("a team needs a non-empty name")
    seats = apportion(reservation, team_shares)
    seats[REST] = reservation - sum(seats.values())
    return seats


def group_levels(
    team_shares: Mapping[str, float], team_usage: Mapping[str, float], also: str | None = None
) -> dict[str, float]:
    """LF of every group of one organisation among its groups.

    The groups are the teams with a share, and ``REST`` (the teams without one)
    when its share ``1 − Σ shares`` is positive, when a team without a share has
    usage, or when ``also`` names it; ``also`` (a group) is always included.
    ``team_usage`` is per team (any team of the organisation); the rest's usage
    is the sum over its teams.

        group_levels({"x": 0.5, "y": 0.5}, {"y": 3.0})  == {"x": inf, "y": 0.5}
    """
    shares: dict[str, float] = dict(team_shares)
    rest_share = 1.0 - math.fsum(team_shares.values())
    if rest_share > 1e-9:
        shares[REST] = rest_share
    usage: dict[str, float] = {}
    for team, value in team_usage.items():
        group = team if team in team_shares else REST
        if value > 0:
            usage[group] = usage.get(group, 0.0) + value
    if also is not None and also not in shares and also not in usage:
        usage[also] = 0.0
    return level_fairshare(shares, usage)


def fair_tree_ranks(
    org_levels: Mapping[str, float], groups: Mapping[str, Mapping[str, float]]
) -> dict[tuple[str, str | None], int]:
    """Dense rank of every leaf, organisations first, then groups inside each.

    ``org_levels`` is LF per organisation (``tree.level_fairshare``); ``groups``
    maps an organisation with team shares to its groups' LF (``group_levels``).
    A leaf is ``(org, group)``, or ``(org, None)`` for an organisation not in
    ``groups``. Larger LF first at both levels; equal LF at a level share a
    place there; the flattened order's distinct places get ranks 0, 1, 2, ...
    capped at ``MAX_RANK``. Raises ``ValueError`` for a NaN level.
    """
    org_place = _places(org_levels)
    keys: dict[tuple[str, str | None], tuple[int, int]] = {}
    for org in org_levels:
        inner = groups.get(org)
        if inner is None:
            keys[(org, None)] = (org_place[org], 0)
            continue
        group_place = _places(inner)
        for group in inner:
            keys[(org, group)] = (org_place[org], group_place[group])
    order = {key: min(i, MAX_RANK) for i, key in enumerate(sorted(set(keys.values())))}
    return {leaf: order[key] for leaf, key in keys.items()}


def _places(levels: Mapping[str, float]) -> dict[str, int]:
    """Uncapped dense places, largest LF first."""
    if any(math.isnan(lf) for lf in levels.values()):
        raise ValueError("a level fairshare is NaN")
    place = {lf: i for i, lf in enumerate(sorted(set(levels.values()), reverse=True))}
    return {name: place[lf] for name, lf in levels.items()}
