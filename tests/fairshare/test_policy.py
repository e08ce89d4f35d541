"""The FairShare policy object: configuration in, reservations and decisions out."""

from __future__ import annotations

import math

import pytest

from fairgate.fairshare import DecayedUsage, Decision, FairShare, PriorityClass, Standing

INTER, BATCH = PriorityClass.INTERACTIVE, PriorityClass.BATCH


@pytest.fixture
def policy() -> FairShare:
    shares = {"A": 0.8125, "B": 0.1875}
    return FairShare({"b300": 256, "small": 10}, {"b300": shares, "small": shares}, 3600.0)


def test_reservations_per_pool(policy: FairShare) -> None:
    assert dict(policy.reservations("b300")) == {"A": 208, "B": 48}
    assert dict(policy.reservations("small")) == {"A": 8, "B": 2}
    assert policy.pools == ("b300", "small")
    assert policy.capacity("small") == 10


def test_reservations_cannot_be_changed_through_the_view(policy: FairShare) -> None:
    with pytest.raises(TypeError):
        policy.reservations("small")["A"] = 10  # type: ignore[index]


def test_within_share_until_the_reservation_is_full(policy: FairShare) -> None:
    usage = {"A": 90.0, "B": 10.0}
    assert policy.decide("small", "A", INTER, 7, usage) == Decision("A", 0, True, None)
    assert policy.decide("small", "A", BATCH, 7, usage) == Decision("A", 1, True, None)
    # A used 90 % for a share of 81.25 %: it ranks behind B and borrows at 10 + 10·1.
    assert policy.decide("small", "A", INTER, 8, usage) == Decision("A", 20, False, 1)
    assert policy.decide("small", "B", BATCH, 2, usage) == Decision("B", 11, False, 0)


def test_an_organisation_without_usage_borrows_first(policy: FairShare) -> None:
    decision = policy.decide("small", "B", INTER, 2, {"A": 5.0})
    assert (decision.priority, decision.rank) == (10, 0)
    assert policy.decide("small", "A", INTER, 8, {"A": 5.0}).rank == 1


def test_an_organisation_without_a_share_always_borrows(policy: FairShare) -> None:
    decision = policy.decide("small", "guest", INTER, 0, {"A": 1.0, "B": 1.0})
    assert decision == Decision("guest", 10, False, 0)  # no usage yet: rank 0
    later = policy.decide("small", "guest", INTER, 0, {"A": 1.0, "B": 1.0, "guest": 1.0})
    assert (later.rank, later.priority) == (2, 30)  # share 0 with usage: LF 0, ranked last


def test_standings_report_every_organisation(policy: FairShare) -> None:
    standings = policy.standings("small", {"A": 90.0, "B": 10.0})
    assert standings["B"] == Standing("B", 0.1875, 2, 10.0, 0.1875 / 0.1, 0)
    assert standings["A"].rank == 1
    assert policy.standings("small", {})["A"].level == math.inf


def test_usage_records_carry_the_policy_half_life(policy: FairShare) -> None:
    record = policy.usage(8.0, at=0.0)
    assert record == DecayedUsage(8.0, 0.0, 3600.0)
    assert record.value_at(3600.0) == pytest.approx(4.0)


def test_unknown_pools_are_errors(policy: FairShare) -> None:
    with pytest.raises(KeyError):
        policy.decide("nowhere", "A", INTER, 0, {})
    with pytest.raises(ValueError, match="unknown pools"):
        FairShare({"p": 10}, {"q": {"A": 1.0}})


@pytest.mark.parametrize(
    ("capacities", "shares", "half_life"),
    [({"p": 10}, {"p": {"A": 0.7, "B": 0.7}}, 1.0), ({"p": 10}, {}, 0.0), ({"p": -1}, {}, 1.0)],
)
def test_invalid_configuration_is_refused(
    capacities: dict[str, int], shares: dict[str, dict[str, float]], half_life: float
) -> None:
    with pytest.raises(ValueError):
        FairShare(capacities, shares, half_life)


def test_a_pool_without_shares_reserves_nothing() -> None:
    policy = FairShare({"p": 4}, {})
    assert dict(policy.reservations("p")) == {}
    assert policy.decide("p", "A", INTER, 0, {}).within_share is False
