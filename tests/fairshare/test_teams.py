"""Team sub-shares: the split of an organisation's reservation, in-org borrowing, and the
two-level Fair Tree ranking."""

from __future__ import annotations

import math

import pytest

from fairgate.fairshare import (
    BORROW_BASE,
    IN_ORG_BASE,
    REST,
    FairShare,
    PriorityClass,
    dense_ranks,
    fair_tree_ranks,
    group_levels,
    level_fairshare,
    split,
)

INF = math.inf
INTER, BATCH = PriorityClass.INTERACTIVE, PriorityClass.BATCH


def test_the_reservation_is_split_by_hamilton_and_the_rest_goes_to_teams_without_a_share() -> None:
    assert split(10, {"research": 0.7, "ops": 0.3}) == {"research": 7, "ops": 3, REST: 0}
    assert split(10, {"research": 0.5}) == {"research": 5, REST: 5}
    assert split(10, {}) == {REST: 10}
    # 13 × 0.7 = 9.1, 13 × 0.3 = 3.9: the larger remainder takes the last seat
    assert split(13, {"research": 0.7, "ops": 0.3}) == {"research": 9, "ops": 4, REST: 0}
    # 3 × 0.45 = 1.35 each: floor(2.7) = 2 seats reserved, the third is the rest's
    assert split(3, {"a": 0.45, "b": 0.45}) == {"a": 1, "b": 1, REST: 1}


def test_split_refuses_shares_above_one_and_the_rest_name() -> None:
    with pytest.raises(ValueError, match="more than 1"):
        split(10, {"a": 0.7, "b": 0.4})
    with pytest.raises(ValueError, match="non-empty"):
        split(10, {REST: 0.5})


def test_the_policy_splits_each_pools_reservation_of_the_organisation() -> None:
    policy = FairShare(
        {"p": 16, "q": 100},
        {"p": {"A": 0.625, "B": 0.375}, "q": {"A": 0.625, "B": 0.375}},
        team_shares={"A": {"x": 0.7, "y": 0.3}},
    )
    assert policy.reservations("p") == {"A": 10, "B": 6}
    assert policy.team_reservations("p", "A") == {"x": 7, "y": 3, REST: 0}
    assert policy.reservations("q") == {"A": 63, "B": 37}  # 62.5 / 37.5: the tie goes to A
    assert policy.team_reservations("q", "A") == {"x": 44, "y": 19, REST: 0}  # 44.1 / 18.9
    assert policy.team_reservations("p", "B") == {}
    assert policy.group("A", "x") == "x"
    assert policy.group("A", "other") == REST
    assert policy.group("B", "x") is None  # no team shares: the organisation is one group


def test_within_outranks_in_org_which_outranks_every_pool_borrower() -> None:
    policy = FairShare({"p": 16}, {"p": {"A": 0.625, "B": 0.375}}, team_shares={"A": {"x": 0.7}})
    within = [policy.within("A", c).priority for c in (INTER, BATCH)]
    in_org = [policy.within("A", c, in_org=True) for c in (INTER, BATCH)]
    assert within == [0, 1]
    assert [d.priority for d in in_org] == [IN_ORG_BASE, IN_ORG_BASE + 1] == [2, 3]
    assert all(d.within_share and d.in_org and d.rank is None for d in in_org)
    lowest_pool = policy.borrow("p", "B", INTER, {}).priority
    assert max(within) < min(d.priority for d in in_org)
    assert max(d.priority for d in in_org) < BORROW_BASE <= lowest_pool


def test_group_levels_normalise_within_the_organisation() -> None:
    # x 0.5 / y 0.5, y used all: x has LF +inf, y 0.5 / 1
    assert group_levels({"x": 0.5, "y": 0.5}, {"y": 3.0}) == {"x": INF, "y": 0.5}
    # the rest (share 0.4) carries the usage of every team without a share
    levels = group_levels({"x": 0.6}, {"x": 1.0, "u": 2.0, "v": 1.0})
    assert levels == pytest.approx({"x": 0.6 / 0.25, REST: 0.4 / 0.75})
    # shares summing to 1 leave no rest unless asked for
    assert REST not in group_levels({"x": 0.7, "y": 0.3}, {})
    assert group_levels({"x": 0.7, "y": 0.3}, {}, also=REST)[REST] == INF


def test_fair_tree_ranks_organisations_first_then_their_groups() -> None:
    ranks = fair_tree_ranks({"A": 2.0, "B": 0.5}, {"A": {"x": INF, "y": 0.5}})
    assert ranks == {("A", "x"): 0, ("A", "y"): 1, ("B", None): 2}
    # a team's own LF never lifts it above a better-served organisation's leaves
    ranks = fair_tree_ranks({"A": 0.5, "B": 2.0}, {"A": {"x": INF, "y": 0.01}})
    assert ranks == {("B", None): 0, ("A", "x"): 1, ("A", "y"): 2}
    # equal LF at a level share a place
    ranks = fair_tree_ranks({"A": 1.0, "B": 1.0}, {"A": {"x": 3.0, "y": 3.0}})
    assert ranks == {("A", "x"): 0, ("A", "y"): 0, ("B", None): 0}


def test_without_team_shares_the_ranks_are_the_one_level_ranks() -> None:
    shares = {f"o{i}": 0.05 for i in range(14)}
    usage = {f"o{i}": float(i + 1) for i in range(14)}
    levels = level_fairshare(shares, usage)
    flat = {org: rank for (org, _), rank in fair_tree_ranks(levels, {}).items()}
    assert flat == dense_ranks(levels)  # capped at 9 the same way
    assert max(flat.values()) == 9


def test_a_pool_borrower_is_ranked_level_by_level() -> None:
    policy = FairShare(
        {"p": 16},
        {"p": {"A": 0.5, "B": 0.5}},
        team_shares={"A": {"x": 0.7, "y": 0.3}},
    )
    # A is under-served (LF 0.5 / 0.25 = 2) against B (0.5 / 0.75); inside A, x used
    # more than its 0.7 (LF 0.7 / 0.9), y less (0.3 / 0.1)
    usage = {"A": 1.0, "B": 3.0}
    by_team = {"A": {"x": 0.9, "y": 0.1}}
    rank = {t: policy.rank("p", "A", usage, team=t, usage_by_team=by_team) for t in "xy"}
    assert rank == {"y": 0, "x": 1}
    assert policy.rank("p", "B", usage, usage_by_team=by_team) == 2
    assert policy.borrow("p", "A", BATCH, usage, team="x", usage_by_team=by_team).priority == 21
    # a team of A without a share is the rest's leaf (share 0 here): first while it has
    # no usage (LF +inf), last in A once it has some (LF 0)
    assert policy.rank("p", "A", usage, team="z", usage_by_team=by_team) == 0
    worn = {"A": {"x": 0.9, "y": 0.1, "z": 0.5}}
    assert policy.rank("p", "A", usage, team="z", usage_by_team=worn) == 2


def test_the_same_policy_without_team_shares_ranks_as_today() -> None:
    shares = {"p": {"A": 0.5, "B": 0.3, "C": 0.2}}
    usage = {"A": 5.0, "B": 1.0, "C": 1.0}
    today = FairShare({"p": 10}, shares)
    teams = FairShare({"p": 10}, shares, team_shares={"C": {"c": 1.0}})
    for org in ("A", "B"):
        assert teams.rank("p", org, usage, usage_by_team={}) == today.rank("p", org, usage)
        assert teams.borrow("p", org, INTER, usage) == today.decide("p", org, INTER, 99, usage)


def test_team_standings_show_teams_with_a_share_or_usage() -> None:
    policy = FairShare({"p": 10}, {"p": {"A": 1.0}}, team_shares={"A": {"x": 0.7, "y": 0.3}})
    rows = policy.team_standings("p", "A", {"x": 2.0, "other": 1.0})
    assert set(rows) == {"x", "y", "other"}
    assert (rows["x"].share, rows["x"].reservation) == (0.7, 7)
    assert (rows["y"].share, rows["y"].reservation, rows["y"].level) == (0.3, 3, INF)
    assert (rows["other"].share, rows["other"].reservation) == (None, 0)  # the rest: 0 seats
    assert rows["y"].rank == 0  # no usage
    plain = FairShare({"p": 10}, {"p": {"A": 1.0}}).team_standings("p", "A", {"t": 1.0})
    assert plain["t"].share is None and plain["t"].reservation == 10 and plain["t"].rank == 0
